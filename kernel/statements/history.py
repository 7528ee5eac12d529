"""Statements that delete settled history: the occurrences pruned by age or by a job's
history limits, and what belonged to them (a done chord's row with its last member)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import bindparam as p

from kernel.db.json_text import json_member
from kernel.db.limit_tables import budget_reservations
from kernel.db.schema import (
    adjudication_asks,
    chords,
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
    "CHORDS_OF_RUNS",
    "LOCK_CHORDS",
    "DELETE_FORGOTTEN_CHORDS",
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
    .returning(OCC.c.id, OCC.c.trigger_key, json_member(OCC.c.links, "chord").label("chord"))
)

#: The chords the runs ``occurrence_ids`` are members of (read before they are deleted).
CHORDS_OF_RUNS = (
    sa.select(json_member(OCC.c.links, "chord"))
    .where(OCC.c.id.in_(p("occurrence_ids", expanding=True)), OCC.c.links.is_not(None))
    .distinct()
)

#: The rows of the chords ``chord_ids``, locked (PostgreSQL) in one order before
#: :data:`DELETE_FORGOTTEN_CHORDS` reads their members: two passes deleting a chord's last
#: two members at once each see the other's member until it commits; the one that locks
#: second reads after the first's commit, sees both gone and deletes the row.
LOCK_CHORDS = (
    sa.select(chords.c.id)
    .where(chords.c.id.in_(p("chord_ids", expanding=True)))
    .order_by(chords.c.id)
    .with_for_update()
)


def _a_member_exists(dialect: str) -> sa.Exists:
    """One of the chord's members (its ``members``, a JSON array of occurrence ids) still
    exists: each taken from the array and sought by id, in the DELETE of that row."""
    if dialect == "sqlite":
        each = sa.func.json_each(chords.c.members).table_valued("value")
        member: sa.ColumnElement[Any] = each.c.value
    else:
        array = sa.cast(chords.c.members, sa.JSON)
        each = sa.func.json_array_elements_text(array).table_valued("value")
        member = sa.cast(each.c.value, sa.BigInteger)
    return sa.exists().select_from(each).where(OCC.c.id == member)


def _delete_forgotten_chords(dialect: str) -> sa.Delete:
    return sa.delete(chords).where(
        chords.c.id.in_(p("chord_ids", expanding=True)),
        sa.or_(
            chords.c.failed_at.is_not(None),
            sa.and_(chords.c.closed_at.is_not(None), chords.c.remaining == 0),
        ),
        ~_a_member_exists(dialect),
    )


#: Of the chords ``chord_ids``, delete those done (body made, or failed) none of whose
#: members exists any more: no settle, hand-over or growth can look for them again, and
#: ``kernel why`` has no member left to tell of. Decided in the statement, each member
#: sought by its id; a growing chord or one with a member left is kept.
DELETE_FORGOTTEN_CHORDS = {
    dialect: _delete_forgotten_chords(dialect) for dialect in ("postgresql", "sqlite")
}
