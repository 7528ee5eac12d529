"""Core statements compiled once per dialect and run on the driver itself.

SQLAlchemy's per-execution work (cache key, parameter processing, execution
context, result set-up) costs several times what sqlite3 or psycopg spend on a
primary-key UPDATE, and the claim/settle hot path runs a handful of statements
per Celery task. A :class:`DriverStatement` keeps the statement's single source
in Core, renders it with the connection's own dialect the first time it runs
there, and from then on hands the driver the SQL text and the parameters (on
psycopg, from its second run on a connection, as that connection's prepared
statement: :mod:`kernel.db.prepared`).

Everything a caller relies on from ``Connection.execute`` still holds: the
statement runs on the connection's DBAPI connection inside its transaction, type
processors convert binds and results, rows are ``sqlalchemy.Row`` objects, and a
driver error arrives wrapped as SQLAlchemy's ``DBAPIError`` — a lost connection
invalidated, with ``connection_invalidated`` set — so errors are translated in
one place (``kernel/transaction/session.py``) whichever way a statement ran.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

import sqlalchemy as sa
from sqlalchemy.engine import result_tuple
from sqlalchemy.sql.compiler import SQLCompiler

if TYPE_CHECKING:
    from kernel.db.prepared import PreparedStatements

__all__ = [
    "DriverStatement",
    "Pipeline",
    "finish",
    "leave_unprepared",
    "pipeline",
    "pipelines",
    "psycopg_idle",
    "render_all",
    "send",
    "switch_autocommit",
]

_Processor = Callable[[Any], Any]

#: libpq's ``PQTRANS_IDLE`` (no transaction open) and ``PQ_PIPELINE_OFF``.
_PG_IDLE = 0
_PG_PIPELINE_OFF = 0
#: The pool record's key for its psycopg connection's statements (kernel/db/prepared.py).
_PREPARED = "kernel_prepared"


@dataclass(frozen=True, slots=True)
class _Rendered:
    """One statement as one dialect's driver takes it."""

    sql: str
    #: Bind values to what the driver takes: a tuple in placeholder order (qmark), or the dict.
    arrange: Callable[[dict[str, Any]], Any]
    #: Values the statement carries itself (``status == 'running'``), already processed.
    defaults: Mapping[str, Any]
    #: Bind processors for the values a caller supplies, where the type has one.
    bind_processors: Mapping[str, _Processor]
    make_row: Callable[[Iterable[Any]], sa.Row[Any]]
    #: The result columns' names, in order (a row read by position).
    keys: tuple[str, ...]
    #: (column index, result processor) for the columns whose type has one.
    result_processors: tuple[tuple[int, _Processor], ...]


class DriverStatement:
    """A Core statement that runs on the DBAPI cursor of the connection it is given.

    Args:
        statement: a Core SELECT, INSERT or UPDATE, or a ``text()`` that returns no
            rows; an expanding ``IN`` cannot be rendered once, so write constant
            lists as literals.
        dialect: the one dialect the statement is written for (``"postgresql"``,
            ``"sqlite"``); None, any.
    """

    def __init__(self, statement: sa.ClauseElement, dialect: str | None = None) -> None:
        self.statement = statement
        self.dialect = dialect
        self._rendered: dict[tuple[str, str, str], _Rendered] = {}
        _MADE.append(self)

    def first(
        self, conn: sa.Connection, params: Mapping[str, Any] | None = None
    ) -> sa.Row[Any] | None:
        """Run and return the first row (the statement must return rows), or None."""
        rows = self.all(conn, params)
        return rows[0] if rows else None

    def all(
        self, conn: sa.Connection, params: Mapping[str, Any] | None = None
    ) -> list[sa.Row[Any]]:
        """Run and return every row (the statement must return rows)."""
        return self._run(conn, params, fetch=True)[0]

    def execute(self, conn: sa.Connection, params: Mapping[str, Any] | None = None) -> int:
        """Run a statement that returns no rows; return the driver's rowcount."""
        return self._run(conn, params, fetch=False)[1]

    def _run(
        self, conn: sa.Connection, params: Mapping[str, Any] | None, *, fetch: bool
    ) -> tuple[list[sa.Row[Any]], int]:
        r = self._rendered.get(_key(conn.dialect)) or self._render(conn.dialect)
        raw, count = send(conn, r.sql, _args(r, params), fetch=fetch)
        return _rows(r, raw), count

    def rendered(self, dialect: sa.Dialect) -> _Rendered:
        """The statement as ``dialect``'s driver takes it, rendered on first use."""
        return self._rendered.get(_key(dialect)) or self._render(dialect)

    def _render(self, dialect: sa.Dialect) -> _Rendered:
        compiled = cast(SQLCompiler, self.statement.compile(dialect=dialect))
        if "POSTCOMPILE" in compiled.string:
            raise ValueError(f"cannot render an expanding IN once: {compiled.string}")
        defaults: dict[str, Any] = {}
        bind_processors: dict[str, _Processor] = {}
        for bind, name in compiled.bind_names.items():
            process = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if bind.required:
                if process is not None:
                    bind_processors[name] = process
            else:
                value = bind.effective_value
                defaults[name] = process(value) if process is not None else value
        columns: Sequence[Any] = list(getattr(self.statement, "exported_columns", ()))
        result_processors = tuple(
            (i, process)
            for i, c in enumerate(columns)
            if (process := c.type.dialect_impl(dialect).result_processor(dialect, None))
        )
        rendered = _Rendered(
            sql=compiled.string,
            arrange=_arrange(tuple(compiled.positiontup or ())) if compiled.positional else dict,
            defaults=defaults,
            bind_processors=bind_processors,
            make_row=result_tuple([c.key for c in columns]),
            keys=tuple(c.key for c in columns),
            result_processors=result_processors,
        )
        if dialect.driver == "psycopg":
            _psycopg_caches(len(rendered.sql.encode()))
        self._rendered[_key(dialect)] = rendered
        return rendered


def _rows(r: _Rendered, raw: Iterable[Any]) -> list[sa.Row[Any]]:
    """The driver's rows as ``sa.Row`` objects, their columns' result processors applied."""
    if not r.result_processors:
        return [r.make_row(row) for row in raw]
    rows = []
    for row in raw:
        cells = list(row)
        for i, process in r.result_processors:
            cells[i] = process(cells[i])
        rows.append(r.make_row(cells))
    return rows


class Pipeline:
    """Statements sent without waiting for their answers (:func:`pipeline`)."""

    def __init__(self, conn: sa.Connection, pipelined: bool) -> None:
        self._conn = conn
        self._pipelined = pipelined

    def send(
        self, statement: DriverStatement, params: Mapping[str, Any]
    ) -> Callable[[], list[sa.Row[Any]]]:
        """Send ``statement`` (which returns rows) and carry on; the answer reads its rows,
        waiting for them (an error of the statement, or of one sent before it, raised
        then, wrapped as :func:`send` wraps it). Not pipelined: it runs now."""
        conn = self._conn
        if not self._pipelined:
            rows = statement.all(conn, params)
            return lambda: rows
        r = statement.rendered(conn.dialect)
        args = _args(r, params)
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            cursor.execute(r.sql, args)
        except conn.dialect.loaded_dbapi.Error as exc:
            raise _wrap(conn, exc, r.sql, args, cursor) from exc
        read: list[list[sa.Row[Any]]] = []

        def answer() -> list[sa.Row[Any]]:
            if not read:
                try:
                    read.append(_rows(r, cursor.fetchall()))
                except conn.dialect.loaded_dbapi.Error as exc:
                    raise _wrap(conn, exc, r.sql, args, cursor) from exc
                finally:
                    cursor.close()
            return read[0]

        return answer


def pipelines(conn: sa.Connection) -> bool:
    """Whether :func:`pipeline` sends statements on ``conn`` without waiting for each
    answer (psycopg's pipeline mode); elsewhere each runs when sent."""
    return conn.dialect.driver == "psycopg"


@contextmanager
def pipeline(conn: sa.Connection, *, enabled: bool = True) -> Iterator[Pipeline]:
    """Statements sent on ``conn`` one after another without waiting for each answer, in its
    transaction: psycopg's pipeline mode (the server runs one while this process makes the
    next); on another driver each runs when sent. Only :meth:`Pipeline.send` inside: a Core
    statement reads its cursor's description at once, which a pipeline has not yet.
    ``enabled`` False: each runs when sent (a statement that switches to autocommit)."""
    if not enabled or not pipelines(conn):
        yield Pipeline(conn, pipelined=False)
        return
    dbapi: Any = conn.connection.dbapi_connection
    try:
        with dbapi.pipeline():
            yield Pipeline(conn, pipelined=True)
    except conn.dialect.loaded_dbapi.Error as exc:  # the pipeline's end: its sync
        raise _wrap(conn, exc, "SYNC", (), None) from exc


def send(conn: sa.Connection, sql: str, args: Any, *, fetch: bool) -> tuple[Sequence[Any], int]:
    """``sql`` on ``conn``'s driver: the rows as the driver gives them (when ``fetch``) and
    its rowcount, a driver error wrapped as ``Connection.execute`` would. On psycopg, from
    its second run on a connection, the connection's prepared statement
    (:mod:`kernel.db.prepared`); else the kept cursor."""
    record = conn.connection
    prepared: PreparedStatements | Literal[False] | None = record.info.get(_PREPARED)
    if prepared is None:
        prepared = record.info[_PREPARED] = _prepared_statements(conn.dialect, record)
    if prepared and prepared.ready():
        try:
            answer = prepared.execute(sql, args, fetch=fetch)
        except conn.dialect.loaded_dbapi.Error as exc:
            raise _wrap(conn, exc, sql, args, None) from exc
        if answer is not None:
            return answer
    cursor = _cursor(record)
    try:
        cursor.execute(sql, args)
        raw = cursor.fetchall() if fetch else ()
        count = int(cursor.rowcount)
    except conn.dialect.loaded_dbapi.Error as exc:
        raise _wrap(conn, exc, sql, args, cursor) from exc
    return raw, count


def _prepared_statements(dialect: sa.Dialect, record: Any) -> PreparedStatements | Literal[False]:
    """The psycopg connection's :class:`~kernel.db.prepared.PreparedStatements`, or False
    for another driver, or where psycopg prepares statements itself: it ends every
    rolled-back transaction with ``DEALLOCATE ALL``, which would drop the kernel's too (the
    kernel's engine turns its own off: ``kernel/db/engine.py``)."""
    dbapi = record.dbapi_connection
    if dialect.driver != "psycopg" or dbapi.prepare_threshold is not None:
        return False
    from kernel.db.prepared import PreparedStatements  # psycopg is PostgreSQL's extra

    return PreparedStatements(dbapi)


def leave_unprepared(record: Any) -> None:
    """Every statement on ``record``'s connection goes through the cursor, unprepared: a
    connection the kernel borrows (a caller's) keeps no statement of the kernel's."""
    record.info[_PREPARED] = False


def finish(conn: sa.Connection, *, commit: bool) -> None:
    """COMMIT or ROLLBACK the transaction ``conn``'s driver holds open, by the driver's own
    method (none open: nothing sent), a driver error wrapped as :func:`send` wraps it."""
    dbapi: Any = conn.connection.dbapi_connection
    if psycopg_idle(dbapi):
        # psycopg's commit()/rollback() send nothing then either, but each goes through its
        # lock and wait loop: after every statement sent alone (``Tx.alone``), twice a run.
        return
    try:
        dbapi.commit() if commit else dbapi.rollback()
    except conn.dialect.loaded_dbapi.Error as exc:
        raise _wrap(conn, exc, "COMMIT" if commit else "ROLLBACK", (), None) from exc


def psycopg_idle(dbapi: Any) -> bool:
    """``dbapi`` is psycopg's, with no transaction open and no pipeline: its ``commit()``,
    ``rollback()`` and ``autocommit`` setter would send nothing and wait for nothing."""
    pgconn = getattr(dbapi, "pgconn", None)
    return (
        pgconn is not None
        and pgconn.transaction_status == _PG_IDLE
        and pgconn.pipeline_status == _PG_PIPELINE_OFF
    )


def switch_autocommit(dbapi: Any, on: bool) -> None:
    """psycopg's ``dbapi.autocommit = on`` for a connection :func:`psycopg_idle` answered
    True for (the caller holds it: no other thread uses it).

    There psycopg's setter only stores the flag its next statement reads to send ``BEGIN``
    first or not, through its lock, a generator and its wait loop, four times a claim and
    success (bench/README.md, session 26): the flag is stored here directly. A psycopg without
    that attribute gets its setter; tests/kernel/test_autocommit_switch.py pins what the
    flag does.
    """
    if hasattr(dbapi, "_autocommit"):
        dbapi._autocommit = on
    else:
        dbapi.autocommit = on


#: Every statement made, for :func:`render_all`; they are module-level constants.
_MADE: list[DriverStatement] = []


def render_all(dialect: sa.Dialect) -> int:
    """Render every statement written for ``dialect`` now; returns how many.

    Rendered statements are kept on the (module-level) statement objects, so processes
    forked after this call share them instead of each rendering its own: rendering walks
    each statement's whole expression tree, and the pages it touches are copied into
    every child that does (bench/end_to_end.py's worker PSS, issue 22).
    """
    made = [s for s in _MADE if s.dialect in (None, dialect.name)]
    for statement in made:
        if _key(dialect) not in statement._rendered:
            statement._render(dialect)
    return len(made)


def _cursor(record: Any) -> Any:
    """The cursor of the pool ``record``'s DBAPI connection for the driver's statements, kept
    in its ``info``, which SQLAlchemy clears when it replaces the connection.

    A new cursor per statement cost each statement its set-up again: psycopg's adaptation
    (its transformer, its loaders: 15 µs of CPU, ``select 1``), sqlite3's cursor object
    (0.3 µs a statement, eight a run: bench/README.md session 20).
    """
    kept = record.info.get("kernel_cursor")
    if kept is None or getattr(kept, "closed", False):  # sqlite3's has no ``closed``
        kept = record.info["kernel_cursor"] = record.dbapi_connection.cursor()
    return kept


def _psycopg_caches(length: int) -> None:
    """Let psycopg keep its parse of a query ``length`` bytes long.

    psycopg parses the placeholders of a query longer than its cache's limit (4096 bytes,
    kept low against an ORM's one-off queries) again at every execution: 53 and 92 µs of
    CPU per run for the claim and a batch's settle-and-claim (bench/cpu_per_op.py). The
    kernel's statements are a fixed few, so the limit grows to fit the longest of them.
    """
    from psycopg import _queries

    # A private of psycopg's: where a version lacks it, its own limit stays (only slower).
    limit = getattr(_queries, "MAX_CACHED_STATEMENT_LENGTH", None)
    if isinstance(limit, int) and limit < length:
        _queries.MAX_CACHED_STATEMENT_LENGTH = length


def _args(r: _Rendered, params: Mapping[str, Any] | None) -> Any:
    """One run's bind values as the driver takes them (defaults, processors, order)."""
    values = {**r.defaults, **params} if params else dict(r.defaults)
    for name, process in r.bind_processors.items():
        if name in values:
            values[name] = process(values[name])
    return r.arrange(values)


def _key(dialect: sa.Dialect) -> tuple[str, str, str]:
    return dialect.name, dialect.driver, dialect.paramstyle


def _arrange(order: tuple[str, ...]) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    """Values by name to a tuple in placeholder order (itemgetter: this runs per statement)."""
    if len(order) > 1:
        return operator.itemgetter(*order)
    return lambda values: tuple(values[name] for name in order)


def _wrap(conn: sa.Connection, exc: Any, sql: str, args: Any, cursor: Any) -> sa.exc.DBAPIError:
    """The error ``Connection.execute`` would raise, invalidating a lost connection."""
    dialect = conn.dialect
    lost = dialect.is_disconnect(exc, conn.connection.dbapi_connection, cursor)
    wrapped = sa.exc.DBAPIError.instance(
        sql, args, exc, dialect.loaded_dbapi.Error, connection_invalidated=lost, dialect=dialect
    )
    if lost:
        conn.invalidate(exc)
    assert isinstance(wrapped, sa.exc.DBAPIError)
    return wrapped
