"""Beat's statements: materialise an occurrence (also run-now's and a chain's), and mark
occurrences hinted."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import bindparam as p
from sqlalchemy.dialects import postgresql, sqlite

from kernel.schema import occurrences

__all__ = ["CREATE_OCCURRENCE", "MARK_HINTED"]

#: What a new occurrence is given; the rest (lease, results, dispatch) starts NULL.
_COLUMNS = (
    "job_id",
    "job_revision",
    "trigger_key",
    "idempotency_key",
    "scheduled_for",
    "status",
    "attempt",
    "max_attempts",
    "fence",
    "available_at",
    "queue",
    "kind",
    "delivery",
    "exclusive",
    "pool",
    "definition",
    "skip_reason",
    "cancel_requested",
    "parent_id",
    "chain_depth",
    "created_at",
    "updated_at",
    "settled_at",
)


def _create(insert: Any) -> Any:
    """Insert unless the firing exists: the unique keys (job, trigger key) and the
    idempotency key decide, not a prior read; zero rows when it exists."""
    return (
        insert(occurrences)
        .values({name: p(name) for name in _COLUMNS})
        .on_conflict_do_nothing()
        .returning(occurrences.c.id)
    )


CREATE_OCCURRENCE = {"postgresql": _create(postgresql.insert), "sqlite": _create(sqlite.insert)}

#: The occurrences ``ids`` were hinted (published) now.
MARK_HINTED = (
    sa.update(occurrences)
    .where(occurrences.c.id.in_(p("ids", expanding=True)))
    .values(dispatched_at=p("now"))
)
