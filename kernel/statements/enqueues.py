"""Enqueue's statement: occurrences of a task's implicit job, one statement per batch."""

from __future__ import annotations

import functools
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from kernel.schema import jobs, occurrences

__all__ = ["ENQUEUE_COLUMNS", "ENQUEUE_OCCURRENCE", "enqueue_occurrences"]

OCC = occurrences

#: What each enqueued row is given (bind ``<name>_<row>``); its job's revision comes
#: from the job row, the rest are the constants of a new queued occurrence.
ENQUEUE_COLUMNS = (
    "job_id",
    "trigger_key",
    "idempotency_key",
    "scheduled_for",
    "max_attempts",
    "available_at",
    "dispatched_at",
    "queue",
    "delivery",
    "pool",
    "definition",
    "created_at",
    "priority",
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


@functools.lru_cache(maxsize=64)
def enqueue_occurrences(dialect: str, rows: int) -> Any:
    """INSERT ``rows`` new occurrences of existing jobs unless their key exists.

    The guard is in the statement: a row is inserted only where its job exists (on
    PostgreSQL the job row is held ``FOR KEY SHARE``, so a concurrent delete waits),
    and the unique ``idempotency_key`` refuses a key that exists or is being inserted
    by another transaction (which then waits for that one to end: two callers of one
    key get one occurrence). Returns each inserted row's ``id``, ``idempotency_key``
    and ``job_revision``.
    """
    values = _row(0) if rows == 1 else sa.union_all(*(_row(i) for i in range(rows)))
    given = values.subquery("given")
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
    return (
        insert.from_select(columns, select)
        .on_conflict_do_nothing()
        .returning(OCC.c.id, OCC.c.idempotency_key, OCC.c.job_revision)
    )


#: The one-row statement per dialect (the transition table's; a batch uses
#: :func:`enqueue_occurrences` with its row count).
ENQUEUE_OCCURRENCE = {dialect: enqueue_occurrences(dialect, 1) for dialect in _INSERTS}
