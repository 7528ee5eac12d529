"""Enqueue's statement: occurrences of a task's implicit job, one statement per batch;
and a chord's row, which its members' settles count down."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from kernel.db.driver import DriverStatement
from kernel.db.schema import chords, jobs, occurrences

__all__ = [
    "CHORD_MEMBERS",
    "CHORD_MEMBER_FAILS",
    "CHORD_MEMBER_HANDED_OVER",
    "CHORD_MEMBER_SUCCEEDS",
    "INSERT_CHORD",
    "ENQUEUE_COLUMNS",
    "ENQUEUE_OCCURRENCE",
    "MAX_ROWS",
    "enqueue_chunks",
    "enqueue_occurrences",
    "enqueue_params",
]

OCC = occurrences

#: What each enqueued row is given (bind ``<name>_<row>``); its job's revision comes
#: from the job row, the rest are the constants of a new queued occurrence.
ENQUEUE_COLUMNS = (
    "job_id",
    "trigger_key",
    "idempotency_key",
    "scheduled_for",
    "max_attempts",
    "max_lost_leases",
    "available_at",
    "dispatched_at",
    "queue",
    "delivery",
    "pool",
    "definition",
    "created_at",
    "priority",
    "links",
    "parent_id",
    "expires_at",
    "rate_limit",
)
_CONSTANTS: dict[str, Any] = {
    "status": "queued",
    "attempt": 0,
    "fence": 0,
    "kind": "task",
    "exclusive": False,
    "cancel_requested": False,
    "chain_depth": 0,
}
_INSERTS = {"postgresql": postgresql.insert, "sqlite": sqlite.insert}


def _row(index: int) -> sa.Select[Any]:
    """One row's values as a SELECT of typed binds (PostgreSQL cannot type a bare NULL)."""
    return sa.select(
        *(
            sa.cast(sa.bindparam(f"{name}_{index}"), OCC.c[name].type).label(name)
            for name in ENQUEUE_COLUMNS
        )
    )


def _given(dialect: str, rows: int) -> Any:
    """The rows' values as a FROM: on PostgreSQL one JSON text read as a record set (one
    plan whatever the count; a UNION of hundreds of SELECTs took seconds to plan, and
    psycopg's escaping of text arrays' quotes cost more CPU than the rest of a batch),
    on SQLite a UNION ALL of one SELECT per row. One row is a SELECT of its values on
    both."""
    if dialect == "postgresql" and rows != 1:
        text = sa.cast(sa.bindparam("given", type_=sa.Text), postgresql.JSON)
        columns = (sa.column(name, OCC.c[name].type) for name in ENQUEUE_COLUMNS)
        return (
            sa.func.json_to_recordset(text)
            .table_valued(*columns)
            .render_derived(name="given", with_types=True)
        )
    values = _row(0) if rows == 1 else sa.union_all(*(_row(i) for i in range(rows)))
    return values.subquery("given")


def enqueue_params(dialect: str, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The parameters of :func:`enqueue_occurrences` for ``rows`` (values by column)."""
    if dialect == "postgresql" and len(rows) != 1:
        given = [{name: row[name] for name in ENQUEUE_COLUMNS} for row in rows]
        return {"given": json.dumps(given, separators=(",", ":"))}
    return {f"{name}_{i}": row[name] for i, row in enumerate(rows) for name in ENQUEUE_COLUMNS}


def enqueue_occurrences(dialect: str, rows: int) -> DriverStatement:
    """INSERT ``rows`` new occurrences of existing jobs unless their key exists
    (parameters: :func:`enqueue_params`; at most :data:`MAX_ROWS` of the dialect).

    The guard is in the statement: a row is inserted only where its job exists (on
    PostgreSQL the job row is held ``FOR KEY SHARE``, so a concurrent delete waits),
    and the unique ``idempotency_key`` refuses a key that exists or is being inserted
    by another transaction (which then waits for that one to end: two callers of one
    key get one occurrence). Returns each inserted row's ``id``, ``idempotency_key``
    and ``job_revision``. Sent on the driver (Core's execution of it cost more CPU than
    the INSERT itself, bench/cpu_per_op.py): one statement per row count, kept for the
    process (:func:`enqueue_chunks` keeps the counts few).
    """
    return _statement(dialect, 0 if dialect == "postgresql" and rows != 1 else rows)


@functools.cache
def _statement(dialect: str, rows: int) -> DriverStatement:
    given = _given(dialect, rows)
    select = sa.select(
        *(given.c[name] for name in ENQUEUE_COLUMNS),
        jobs.c.revision,
        *(sa.literal(value, OCC.c[name].type) for name, value in _CONSTANTS.items()),
        given.c.created_at,
    ).where(jobs.c.id == given.c.job_id)
    if dialect == "postgresql":
        select = select.with_for_update(read=True, key_share=True, of=jobs)
    columns = [*ENQUEUE_COLUMNS, "job_revision", *_CONSTANTS, "updated_at"]
    insert: Any = _INSERTS[dialect](OCC)
    return DriverStatement(
        insert.from_select(columns, select)
        .on_conflict_do_nothing()
        .returning(OCC.c.id, OCC.c.idempotency_key, OCC.c.job_revision),
        dialect,
    )


#: Rows one statement takes at most: SQLite limits a compound SELECT to 500 terms.
MAX_ROWS = {"postgresql": 5000, "sqlite": 500}


def enqueue_chunks(dialect: str, rows: int) -> list[tuple[int, int]]:
    """(first row, row count) of each statement enqueuing ``rows`` rows, in order.

    On SQLite a statement has one SELECT per row and is kept per row count
    (:func:`enqueue_occurrences`), so counts are powers of two: whatever sizes a process
    enqueues, it keeps at most nine statements (1 to 256 rows). PostgreSQL's batch is one
    statement for every count: chunks of :data:`MAX_ROWS`.
    """
    if dialect == "postgresql":
        step = MAX_ROWS[dialect]
        return [(start, min(step, rows - start)) for start in range(0, rows, step)]
    chunks: list[tuple[int, int]] = []
    start = 0
    while start < rows:
        size = 1 << (min(rows - start, MAX_ROWS[dialect]).bit_length() - 1)
        chunks.append((start, size))
        start += size
    return chunks


#: The one-row statement per dialect (the transition table's; a batch uses
#: :func:`enqueue_occurrences` with its row count).
ENQUEUE_OCCURRENCE = {dialect: enqueue_occurrences(dialect, 1) for dialect in _INSERTS}


def _p(name: str) -> sa.BindParameter[Any]:
    return sa.bindparam(name)


def _insert_chord(insert: Any) -> Any:
    return (
        insert(chords)
        .values(
            id=_p("chord_id"), members=_p("members"), body=_p("body"),
            remaining=_p("remaining"), created_at=_p("now"),
        )
        .on_conflict_do_nothing()
        .returning(chords.c.id)
    )  # fmt: skip


#: A chord's row, made with its members; an id that exists is not made again (zero rows).
INSERT_CHORD = {dialect: _insert_chord(insert) for dialect, insert in _INSERTS.items()}
_OPEN = sa.and_(chords.c.id == _p("chord_id"), chords.c.remaining > 0, chords.c.failed_at.is_(None))
#: A member succeeded: one fewer to wait for, while the chord is open (the row stays held
#: until the settle commits, so the next member's settle counts after it). The one that
#: reads ``remaining`` 0 makes the body.
CHORD_MEMBER_SUCCEEDS = (
    sa.update(chords)
    .where(_OPEN)
    .values(remaining=chords.c.remaining - 1)
    .returning(chords.c.remaining, chords.c.members, chords.c.body)
)
#: A member failed for good: the chord fails, once (zero rows when it failed already).
CHORD_MEMBER_FAILS = (
    sa.update(chords).where(_OPEN).values(failed_at=_p("now")).returning(chords.c.body)
)
#: An open chord's members (group order), None when it is not open.
CHORD_MEMBERS = sa.select(chords.c.members).where(_OPEN)
#: A member replaced: its place in ``members`` is its replacement's, compare-and-set on
#: the members read (zero rows: another member's replacement changed them first).
CHORD_MEMBER_HANDED_OVER = (
    sa.update(chords)
    .where(_OPEN, chords.c.members == _p("members"))
    .values(members=_p("new_members"))
    .returning(chords.c.id)
)
