"""Enqueue's statement: occurrences of a task's implicit job, one statement per batch."""

from __future__ import annotations

import functools
import json
import operator
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from kernel.db.clock import StatementNow
from kernel.db.driver import DriverStatement
from kernel.db.json_text import json_object, omitted_when
from kernel.db.schema import jobs, occurrences
from kernel.events import EventType
from kernel.spec.task_runs import GENERATED_TRIGGER
from kernel.statements.logged import logged

__all__ = [
    "ENQUEUE_COLUMNS",
    "LOG_ENQUEUED",
    "ENQUEUE_OCCURRENCE",
    "MAX_ROWS",
    "enqueue_chunks",
    "enqueue_occurrences",
    "enqueue_params",
]

OCC = occurrences

#: What each enqueued row is given (bind ``<name>_<row>``). Its times are relative to the
#: statement's instant (kernel/spec/enqueue_request.py ``EnqueueRow``); its job's
#: revision comes from the job row; the rest are the constants of a new queued occurrence.
ENQUEUE_COLUMNS = (
    "job_id",
    "trigger_key",
    "idempotency_key",
    "max_attempts",
    "max_lost_leases",
    "delay_ms",
    "not_before",
    "hinted",
    "queue",
    "delivery",
    "pool",
    "exclusive",
    "definition",
    "priority",
    "links",
    "parent_id",
    "expires_at",
    "expires_after",
    "rate_limit",
)
_TYPES: dict[str, Any] = {
    **{name: OCC.c[name].type for name in ENQUEUE_COLUMNS if name in OCC.c},
    "delay_ms": sa.BigInteger(),
    "not_before": sa.BigInteger(),
    "hinted": sa.Boolean(),
    "expires_after": sa.BigInteger(),
}
_CONSTANTS: dict[str, Any] = {
    "status": "queued",
    "attempt": 0,
    "fence": 0,
    "kind": "task",
    "cancel_requested": False,
    "chain_depth": 0,
}
_INSERTS = {"postgresql": postgresql.insert, "sqlite": sqlite.insert}


def _row() -> sa.Select[Any]:
    """One row's values as typed binds (PostgreSQL cannot type a bare NULL)."""
    return sa.select(
        *(sa.cast(sa.bindparam(f"{n}_0"), _TYPES[n]).label(n) for n in ENQUEUE_COLUMNS)
    )


#: What the runs of one task in a batch share, sent once a batch with its definition's head
#: and tail as the runs' *template*; each row sends its own columns, its definition's own
#: text and its template's index. SQLite's JSON functions parse a row's text again for
#: each value read from it: 20 values a row were 6.5 of a 500-row batch's ~27 ms, 8 values
#: and a template joined 2.7 (bench/README.md, session 30).
_SHARED = (
    "job_id", "max_attempts", "max_lost_leases", "hinted", "queue", "delivery", "pool",
    "exclusive", "priority", "expires_after", "rate_limit",
)  # fmt: skip
_OWN = tuple(n for n in ENQUEUE_COLUMNS if n not in _SHARED and n != "definition")
_ROW_COLUMNS = (*_OWN, "definition", "template")
_TEMPLATE_COLUMNS = ("head", "tail", *_SHARED)
_OWN_VALUES = operator.itemgetter(*_OWN)
_SHARED_VALUES = operator.itemgetter(*_SHARED)
_json = json.JSONEncoder(separators=(",", ":")).encode


def _given(dialect: str, rows: int) -> Any:
    """The rows' values as a FROM: one row's binds; a batch's JSON texts and templates
    (one statement and one plan whatever its size; a UNION of a SELECT per row took
    seconds to plan, psycopg's escaping of text arrays cost more CPU than the rest of a
    batch). PostgreSQL reads it twice: a CTE."""
    values = _row() if rows == 1 else _batch(dialect)
    return values.cte("given") if dialect == "postgresql" else values.subquery("given")


def _batch(dialect: str) -> sa.TextualSelect:
    """A batch's values (:func:`enqueue_params`), each row joined to its template, read
    once: a template's values read by index from an array per row were parsed again
    (SQLite) or walked to (a PostgreSQL text array) for every row. PostgreSQL zips one
    JSON array per column (objects per row repeat every name), a string staying text (a
    cast to ``VARCHAR(n)`` would cut a value the column refuses), the rows numbered to
    keep their order. SQLite reads an array per row (objects: +7 ms/500) and a
    materialized table of the templates."""
    order = ""
    if dialect == "postgresql":

        def zipped(given: str, names: Sequence[str], alias: str) -> str:
            arrays = ", ".join(f"json_array_elements_text(CAST(:{given}_{i} AS JSON))"
                               for i in range(len(names)))  # fmt: skip
            columns = ", ".join(f'"{name}"' for name in names)
            return f"ROWS FROM ({arrays}) WITH ORDINALITY AS {alias}({columns}, at)"

        rows = (
            f"{zipped('given', _ROW_COLUMNS, 'c')}"
            f" JOIN {zipped('template', _TEMPLATE_COLUMNS, 't')}"
            ' ON t.at = CAST(c."template" AS BIGINT) + 1'
        )
        order = " ORDER BY c.at"

        def source(name: str) -> str:
            return f'{"t" if name in _TEMPLATE_COLUMNS else "c"}."{name}"'

    else:
        read_once = ", ".join(f"json_extract(value, '$[{i}]') AS \"{name}\""
                              for i, name in enumerate(_TEMPLATE_COLUMNS))  # fmt: skip
        at = f"json_extract(r.value, '$[{_ROW_COLUMNS.index('template')}]')"
        # CROSS JOIN: the rows stay the outer loop, in their order, each finding its
        # template by the automatic index SQLite gives a materialized table.
        rows = (
            f"(WITH t AS MATERIALIZED (SELECT key AS at, {read_once} FROM json_each(:templates))"
            f" SELECT r.value AS value, t.* FROM json_each(:given) AS r CROSS JOIN t"
            f" WHERE t.at = {at})"
        )

        def source(name: str) -> str:
            if name in _TEMPLATE_COLUMNS:
                return f'"{name}"'
            return f"json_extract(value, '$[{_ROW_COLUMNS.index(name)}]')"

    def read(name: str) -> str:
        if name == "definition":
            return f"{source('head')} || {source(name)} || {source('tail')}"
        kind = _TYPES[name]
        if dialect == "sqlite" or isinstance(kind, sa.String):
            return source(name)
        return f"CAST({source(name)} AS {kind.compile()})"  # INTEGER, BIGINT, BOOLEAN

    selected = ", ".join(f'{read(name)} AS "{name}"' for name in ENQUEUE_COLUMNS)
    return sa.text(f"SELECT {selected} FROM {rows}{order}").columns(
        *(sa.column(name, _TYPES[name]) for name in ENQUEUE_COLUMNS)
    )


def enqueue_params(dialect: str, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The parameters of :func:`enqueue_occurrences` for ``rows`` (values by column; a
    row's ``definition_parts``, its definition as (head, own text, tail), else the whole
    text is its own), but for ``now`` (``Tx.now_param``)."""
    if len(rows) == 1:
        return {f"{name}_0": rows[0][name] for name in ENQUEUE_COLUMNS}
    templates: dict[tuple[Any, ...], int] = {}
    given = []
    for row in rows:
        head, own, tail = row.get("definition_parts") or ("", row["definition"], "")
        at = templates.setdefault((head, tail, *_SHARED_VALUES(row)), len(templates))
        given.append((*_OWN_VALUES(row), own, at))
    if dialect == "postgresql":
        return {
            **{f"given_{i}": _json(c) for i, c in enumerate(zip(*given, strict=True))},
            **{f"template_{i}": _json(c) for i, c in enumerate(zip(*templates, strict=True))},
        }
    return {"given": _json(given), "templates": _json(list(templates))}


def enqueue_occurrences(dialect: str, rows: int) -> DriverStatement:
    """INSERT ``rows`` new occurrences of existing jobs unless their key exists
    (parameters: :func:`enqueue_params` and ``now``, None on PostgreSQL for the server's
    clock; at most :data:`MAX_ROWS`).

    The guard is in the statement: a row is inserted only where its job exists (on
    PostgreSQL the job row is held ``FOR KEY SHARE``, so a concurrent delete waits),
    and the unique (job, trigger key) refuses a key that exists or is being inserted
    by another transaction (which then waits for that one to end: two callers of one
    key get one occurrence). Its times are read against the statement's instant.

    Returns, on SQLite, each inserted row (``id``, ``idempotency_key``, ``job_revision``,
    ``available_at``, ``expires_at``, ``now``; ``existing_id`` NULL), whose event the
    caller appends. On PostgreSQL the statement writes the events itself and answers
    every given row: the inserted one's columns, or NULL and the ``existing_id`` of a
    caller's key as the statement's snapshot saw it (NULL too for a key another
    transaction inserted meanwhile, a generated key, or a job that does not exist): one
    round trip.

    Sent on the driver (Core's execution of it cost more CPU than the INSERT itself,
    bench/cpu_per_op.py): two statements a dialect, one row and a batch.
    """
    return _statement(dialect, 1 if rows == 1 else 0)


@functools.cache
def _statement(dialect: str, rows: int) -> DriverStatement:
    given = _given(dialect, rows)
    now = StatementNow()
    start = (sa.func.greatest if dialect == "postgresql" else sa.func.max)(
        now + given.c.delay_ms, sa.func.coalesce(given.c.not_before, 0)
    )
    values = {
        "job_id": given.c.job_id,
        "trigger_key": given.c.trigger_key,
        "idempotency_key": given.c.idempotency_key,
        "scheduled_for": start,
        "max_attempts": given.c.max_attempts,
        "max_lost_leases": given.c.max_lost_leases,
        "available_at": start,
        "dispatched_at": sa.case((given.c.hinted, start), else_=sa.null()),
        "queue": given.c.queue,
        "delivery": given.c.delivery,
        "pool": given.c.pool,
        "exclusive": given.c.exclusive,
        "definition": given.c.definition,
        "created_at": now,
        "priority": given.c.priority,
        "links": given.c.links,
        "parent_id": given.c.parent_id,
        "expires_at": sa.func.coalesce(given.c.expires_at, now + given.c.expires_after),
        "rate_limit": given.c.rate_limit,
        "job_revision": jobs.c.revision,
        **{name: sa.literal(value, OCC.c[name].type) for name, value in _CONSTANTS.items()},
        "updated_at": now,
    }
    select = sa.select(*values.values()).where(jobs.c.id == given.c.job_id)
    if dialect == "postgresql":
        select = select.with_for_update(read=True, key_share=True, of=jobs)
    dialect_insert: Any = _INSERTS[dialect](OCC)
    insert = dialect_insert.from_select(list(values), select).on_conflict_do_nothing()
    made = (OCC.c.id, OCC.c.idempotency_key, OCC.c.job_revision, OCC.c.available_at,
            OCC.c.expires_at)  # fmt: skip
    if dialect == "sqlite":
        returning = insert.returning(
            *made, OCC.c.created_at.label("now"), sa.null().label("existing_id")
        )
        return DriverStatement(returning, dialect)
    inserted = insert.returning(
        *made, OCC.c.job_id, OCC.c.trigger_key, OCC.c.priority, OCC.c.parent_id,
        OCC.c.created_at,
    ).cte("made")  # fmt: skip
    existing = OCC.alias("existing")
    # A key's existing row by its firing's unique key (revision 0028), sought only for a
    # caller's key: a generated one is new (were it not, the caller's read after finds
    # it). Joined for every row, the cached plan scanned all of history (bench/README.md,
    # session 31).
    existing_id = sa.case(
        (
            sa.not_(given.c.trigger_key.startswith(GENERATED_TRIGGER, autoescape=True)),
            sa.select(existing.c.id)
            .where(existing.c.job_id == given.c.job_id,
                   existing.c.trigger_key == given.c.trigger_key)
            .scalar_subquery(),
        ),
    )  # fmt: skip
    answer = (
        sa.select(
            given.c.idempotency_key,
            *(inserted.c[c.name] for c in made if c.name != "idempotency_key"),
            now.label("now"),
            existing_id.label("existing_id"),
        )
        .select_from(
            given.outerjoin(inserted, inserted.c.idempotency_key == given.c.idempotency_key)
        )
        .add_cte(_created_logged(inserted).cte("created_logged"))
    )
    return DriverStatement(answer, dialect)


def _created_logged(made: Any, where: Any = None) -> sa.Insert:
    """The ``occurrence_created`` event of each row of ``made`` (the statement's inserted
    rows on PostgreSQL, the occurrences ``where`` picks on SQLite), its data as
    ``kernel.occurrences.rows.enqueued_event`` describes it."""
    data = json_object(
        enqueued=True,
        expires_at=omitted_when(made.c.expires_at.is_(None), made.c.expires_at),
        parent_id=omitted_when(made.c.parent_id.is_(None), made.c.parent_id),
        priority=omitted_when(made.c.priority == 0, made.c.priority),
        revision=made.c.job_revision,
        scheduled_for=made.c.available_at,
        trigger_key=made.c.trigger_key,
    )
    return logged(
        made.c.created_at,
        sa.literal(EventType.OCCURRENCE_CREATED.value),
        made.c.job_id,
        made.c.id,
        sa.null(),
        data,
        where=where,
    )


_MADE_IDS = sa.select(
    sa.func.json_each(sa.bindparam("ids", type_=sa.Text)).table_valued("value").c.value
)
#: On SQLite, whose INSERT cannot write a second table: the events of the occurrences a
#: batch's statement inserted (``ids``: their ids, in order, as one JSON array), in one
#: statement where they were one row each.
LOG_ENQUEUED = DriverStatement(_created_logged(OCC, OCC.c.id.in_(_MADE_IDS)), "sqlite")


#: Rows one statement takes at most (a batch's JSON text stays a few megabytes).
MAX_ROWS = 5000


def enqueue_chunks(rows: int) -> list[tuple[int, int]]:
    """(first row, row count) of each statement enqueuing ``rows`` rows, in order."""
    return [(start, min(MAX_ROWS, rows - start)) for start in range(0, rows, MAX_ROWS)]


#: The one-row statement per dialect (the transition table's; a batch uses
#: :func:`enqueue_occurrences` with its row count).
ENQUEUE_OCCURRENCE = {dialect: enqueue_occurrences(dialect, 1) for dialect in _INSERTS}
