"""Statements that delete settled history: the occurrences pruned by age or by a job's
history limits, and what belonged to them."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import bindparam as p

from kernel.db.limit_tables import budget_reservations
from kernel.db.schema import (
    adjudication_asks,
    controls,
    events,
    notifications,
    occurrences,
    operator_requests,
    requeue_grants,
)
from kernel.statements.predicates import WAITED_ON_BY_A_CHORD
from kernel.states import RESOLVED

__all__ = [
    "FORGET_OCCURRENCE_ROWS",
    "FORGET_OCCURRENCE_EVENTS",
    "FORGET_OCCURRENCE_REQUESTS",
    "DELETE_OCCURRENCES",
    "DELETE_PAST_HISTORY_LIMIT",
]

OCC = occurrences

#: The rows that name the occurrences ``occurrence_ids``: controls, grants, asks,
#: reservations (the window's counters keep what it counted; the row only named the
#: occurrence) and notifications.
FORGET_OCCURRENCE_ROWS = tuple(
    sa.delete(table).where(table.c.occurrence_id.in_(p("occurrence_ids", expanding=True)))
    for table in (
        controls,
        requeue_grants,
        adjudication_asks,
        budget_reservations,
        notifications,
    )
)
#: The events of the occurrences ``occurrence_ids``.
FORGET_OCCURRENCE_EVENTS = sa.delete(events).where(
    events.c.occurrence_id.in_(p("occurrence_ids", expanding=True))
)
#: Operator requests about the occurrences ``targets`` (their ids as text) made before
#: ``requests_before``.
FORGET_OCCURRENCE_REQUESTS = sa.delete(operator_requests).where(
    operator_requests.c.created_at < p("requests_before"),
    operator_requests.c.target.in_(p("targets", expanding=True)),
)
#: The occurrences ``occurrence_ids`` themselves.
DELETE_OCCURRENCES = sa.delete(OCC).where(OCC.c.id.in_(p("occurrence_ids", expanding=True)))

_PAST_LIMIT = (
    sa.select(OCC.c.id)
    .where(OCC.c.job_id == p("job_id"), OCC.c.status == p("status"))
    .order_by(OCC.c.settled_at.desc(), OCC.c.id.desc())
    .limit(p("limit"))
    .offset(p("keep"))
)
#: Delete one job's runs of one status past its newest ``keep``, at most ``limit``;
#: never an unresolved run (a dead letter, an adjudication: SPEC §6), whatever is asked,
#: nor one a chord's body still waits for.
DELETE_PAST_HISTORY_LIMIT = (
    sa.delete(OCC)
    .where(
        OCC.c.id.in_(_PAST_LIMIT.scalar_subquery()),
        OCC.c.status == p("status"),
        OCC.c.status.in_([s.value for s in RESOLVED]),
        ~WAITED_ON_BY_A_CHORD,
    )
    .returning(OCC.c.id, OCC.c.trigger_key)
)
