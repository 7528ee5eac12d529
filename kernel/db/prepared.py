"""The kernel's statements on PostgreSQL, prepared once per connection and sent by libpq.

psycopg's cursor spends about 30 µs of Python on each statement around its one libpq call:
the placeholders converted and the values reordered, its cache of prepared statements
consulted, the cursor's results and row maker set up, through layers of generators — 60 of
a claim and success's 125 µs of CPU on the bare driver (bench/README.md, session 32). The
kernel sends a fixed few statements, each rendered once (:class:`~kernel.db.driver.
DriverStatement`), so each is converted once per process and prepared once per connection
and per the types its values are sent as (as psycopg keys its own prepared statements),
then sent with ``PQsendQueryPrepared``. What the caller sees is what ``cursor.execute``
gives: the values adapted and the rows loaded by psycopg's own adapters for the
connection, the wait the connection's own (a Ctrl-C cancels the query in the server), a
failure raised as the error psycopg raises for it.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import DatabaseError, adapt, errors, generators, pq
from psycopg.adapt import PyFormat

__all__ = ["PreparedStatements"]

_PLACEHOLDER = re.compile(r"%(%|\(([^)]+)\)s)")
_ANSWERS = (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK)
_INTRANS = pq.TransactionStatus.INTRANS
_IDLE = pq.TransactionStatus.IDLE
_PIPELINE_OFF = pq.PipelineStatus.OFF


@dataclass(frozen=True, slots=True)
class _Query:
    """A pyformat statement (``%(name)s``) as libpq takes it: ``$n`` placeholders."""

    text: bytes
    #: The values by name, in placeholder order.
    values: Callable[[Mapping[str, Any]], Sequence[Any]]
    formats: tuple[PyFormat, ...]


_QUERIES: dict[str, _Query] = {}


def _query(sql: str) -> _Query:
    """``sql`` converted once per process (the kernel's statements are a fixed few)."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(2)
        if name is None:  # "%%", a literal percent
            return "%"
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    text = _PLACEHOLDER.sub(number, sql)
    values: Callable[[Mapping[str, Any]], Sequence[Any]]
    if len(names) > 1:
        values = operator.itemgetter(*names)
    else:
        values = lambda args: tuple(args[name] for name in names)  # noqa: E731
    query = _QUERIES[sql] = _Query(text.encode(), values, (PyFormat.AUTO,) * len(names))
    return query


def _plain(dbapi: Any) -> bool:
    """The connection's transactions begin with a plain ``BEGIN`` (no isolation level,
    access mode or deferrable of its own), the one :meth:`PreparedStatements.execute` sends."""
    return dbapi.isolation_level is None and dbapi.read_only is None and dbapi.deferrable is None


class PreparedStatements:
    """One psycopg connection's prepared statements and the adapters its values and rows
    go through (the connection's, as its cursors'). Used by the thread holding it."""

    def __init__(self, dbapi: Any) -> None:
        self._dbapi = dbapi
        self._pgconn: Any = dbapi.pgconn
        self._adapt: Any = adapt.Transformer(dbapi)
        #: (statement, its values' types) -> its prepared name; None: run once, unprepared.
        self._names: dict[tuple[str, tuple[int, ...]], bytes | None] = {}
        self._prepared = 0

    def ready(self) -> bool:
        """Whether a statement sent now runs as the cursor would run it: no pipeline, no
        query in flight or failed transaction, and a transaction to begin only when its
        ``BEGIN`` is the plain one (else the cursor's path is taken, which begins it)."""
        dbapi, pgconn = self._dbapi, self._pgconn
        if pgconn.pipeline_status != _PIPELINE_OFF:
            return False
        status = pgconn.transaction_status
        return status == _INTRANS or (status == _IDLE and (dbapi.autocommit or _plain(dbapi)))

    def execute(
        self, sql: str, args: Mapping[str, Any], *, fetch: bool
    ) -> tuple[list[tuple[Any, ...]], int] | None:
        """Run ``sql`` with ``args``: its rows (when ``fetch``) and its row count. None, and
        nothing sent, the first time the statement comes with values of these types: the
        cursor runs it then, unprepared, in one round trip (a statement run once is not
        worth a second one), and the next time prepares it."""
        query = _QUERIES.get(sql) or _query(sql)
        adapter = self._adapt
        params = adapter.dump_sequence(query.values(args), query.formats)
        key = (sql, adapter.types)
        name = self._names.get(key)
        if name is None and key not in self._names:
            self._names[key] = None
            return None
        if self._pgconn.transaction_status == _IDLE and not self._dbapi.autocommit:
            self._run(b"BEGIN")  # as the cursor begins its transaction (psycopg's are implicit)
        if name is None:
            name = self._prepare(key, query.text)
        try:
            with self._dbapi.lock:
                self._pgconn.send_query_prepared(name, params, param_formats=adapter.formats)
                result = self._answer()
        except errors.InvalidSqlStatementName:
            self._names.clear()  # deallocated behind the kernel's back: prepared again
            raise
        if result.status == pq.ExecStatus.TUPLES_OK:
            count = result.ntuples
            if not fetch:
                return [], count
            adapter.set_pgresult(result)
            return adapter.load_rows(0, count, tuple), count
        tuples = result.command_tuples
        return [], -1 if tuples is None else tuples

    def _prepare(self, key: tuple[str, tuple[int, ...]], text: bytes) -> bytes:
        name = f"kernel_{self._prepared}".encode()
        with self._dbapi.lock:
            self._pgconn.send_prepare(name, text, param_types=key[1])
            self._answer()
        self._prepared += 1
        self._names[key] = name
        return name

    def _run(self, command: bytes) -> None:
        with self._dbapi.lock:
            self._pgconn.send_query(command)
            self._answer()

    def _answer(self) -> Any:
        """The one result of what was just sent, raised as psycopg raises it when a failure."""
        results = self._dbapi.wait(generators.execute(self._pgconn))
        result = results[-1]
        if result.status not in _ANSWERS:
            if result.status == pq.ExecStatus.FATAL_ERROR:
                raise errors.error_from_result(result, encoding=self._dbapi.info.encoding)
            raise DatabaseError(f"unexpected result status: {pq.ExecStatus(result.status).name}")
        return result
