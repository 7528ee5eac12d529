"""Statements that delete settled history: the occurrences pruned by age or by a job's
history limits, and what belonged to them (a done chord's row with its last member).

A prune on SQLite goes in short steps, each holding the one writer lock
(kernel/facade/upkeep.py), so what a step sends is built once per dialect and sent on the
driver (:class:`~kernel.db.driver.DriverStatement`): the occurrences a step deletes are
one parameter (``ids``: :func:`ids_param`), not an expanding ``IN`` that Core renders again
per run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy import bindparam as p
from sqlalchemy.dialects import postgresql

from kernel.db.driver import DriverStatement
from kernel.db.json_text import json_member
from kernel.db.limit_tables import budget_reservations
from kernel.db.schema import (
    EMPTY_CHORD_WHERE,
    SETTLED_KEY,
    SETTLED_WHERE,
    adjudication_asks,
    chords,
    controls,
    events,
    notifications,
    occurrences,
    operator_requests,
    requeue_grants,
)
from kernel.records import dumps
from kernel.statements.predicates import WAITED_ON_BY_A_CHORD
from kernel.states import RESOLVED

__all__ = [
    "ids_param",
    "OLDEST_PRUNABLE",
    "NAMED_BY_PRUNED",
    "FORGET_OCCURRENCE_ROWS",
    "FORGET_OCCURRENCE_EVENTS",
    "FORGET_OCCURRENCE_REQUESTS",
    "DELETE_OCCURRENCES",
    "DELETE_PAST_HISTORY_LIMIT",
    "CHORDS_OF_RUNS",
    "EMPTY_CHORDS",
    "LOCK_CHORDS",
    "DELETE_FORGOTTEN_CHORDS",
]

OCC = occurrences
_DIALECTS = ("postgresql", "sqlite")
#: Never an unresolved run (a dead letter, an adjudication: SPEC §6), whatever is asked;
#: literals, so that a statement rendered once for the driver holds them.
_RESOLVED = OCC.c.status.in_([sa.literal_column(f"'{s}'") for s in RESOLVED])

#: Retention's read: the oldest ``limit`` occurrences of ``status`` settled before
#: ``settled_before`` that no chord's body still waits for, one seek on
#: ``occurrences_settled_by_status``: the index's predicate repeated, then
#: ``lower(status) = :status`` as it is keyed (kernel/db/schema.py says why).
OLDEST_PRUNABLE = DriverStatement(
    sa.select(OCC.c.id)
    .where(
        SETTLED_WHERE,
        SETTLED_KEY == p("status"),  # noqa: SIM300 (the index's key, as it is written)
        _RESOLVED,
        OCC.c.settled_at < p("settled_before"),
        ~WAITED_ON_BY_A_CHORD,
    )
    .order_by(OCC.c.settled_at)
    .limit(p("limit"))
)


def _in_ids(column: sa.ColumnElement[Any], dialect: str) -> sa.ColumnElement[bool]:
    """``column`` is one of the occurrences ``ids`` (:func:`ids_param`): on PostgreSQL an
    array, ``= ANY`` being an index condition whatever the planner's statistics; on
    SQLite the elements of one JSON array text."""
    type_ = column.type
    if dialect == "postgresql":
        return column == sa.any_(
            sa.cast(p("ids", type_=postgresql.ARRAY(sa.BigInteger)), postgresql.ARRAY(type_))
        )
    each = sa.func.json_each(p("ids", type_=sa.Text)).table_valued("value")
    return column.in_(sa.select(sa.cast(each.c.value, type_)))


def ids_param(dialect: str, ids: Sequence[int]) -> Any:
    """The ``ids`` of the statements below for the occurrences ``ids``."""
    return list(ids) if dialect == "postgresql" else dumps(list(ids))


def _per_dialect(make: Callable[[str], sa.ClauseElement]) -> dict[str, DriverStatement]:
    return {dialect: DriverStatement(make(dialect), dialect) for dialect in _DIALECTS}


#: The tables whose rows name an occurrence: controls, grants, asks, reservations (the
#: window's counters keep what it counted; the row only named the occurrence) and
#: notifications. They seldom hold a row of a settled occurrence, so a step probes them
#: all at once (:data:`NAMED_BY_PRUNED`) before deleting from each.
_NAMING = (controls, requeue_grants, adjudication_asks, budget_reservations, notifications)


def _named(dialect: str) -> sa.Select[tuple[bool]]:
    return sa.select(
        sa.or_(
            *(sa.exists().where(_in_ids(table.c.occurrence_id, dialect)) for table in _NAMING),
            sa.exists().where(_in_ids(operator_requests.c.target, dialect)),
        ).label("named")
    )


#: Whether any row of :data:`_NAMING` or any operator request names one of the
#: occurrences ``ids``: when none does, their deletes are not sent.
NAMED_BY_PRUNED = _per_dialect(_named)


def _forget_rows(table: sa.Table) -> Callable[[str], sa.ClauseElement]:
    return lambda dialect: sa.delete(table).where(_in_ids(table.c.occurrence_id, dialect))


#: The rows of :data:`_NAMING` that name the occurrences ``ids``, one statement per table.
FORGET_OCCURRENCE_ROWS = tuple(_per_dialect(_forget_rows(table)) for table in _NAMING)
#: The events of the occurrences ``ids``.
FORGET_OCCURRENCE_EVENTS = _per_dialect(
    lambda dialect: sa.delete(events).where(_in_ids(events.c.occurrence_id, dialect))
)
#: Operator requests about the occurrences ``ids`` made before ``requests_before``.
FORGET_OCCURRENCE_REQUESTS = _per_dialect(
    lambda dialect: sa.delete(operator_requests).where(
        operator_requests.c.created_at < p("requests_before"),
        _in_ids(operator_requests.c.target, dialect),
    )
)
#: The occurrences ``ids`` themselves.
DELETE_OCCURRENCES = _per_dialect(lambda dialect: sa.delete(OCC).where(_in_ids(OCC.c.id, dialect)))

_PAST_LIMIT = (
    sa.select(OCC.c.id)
    .where(OCC.c.job_id == p("job_id"), OCC.c.status == p("status"))
    .order_by(OCC.c.settled_at.desc(), OCC.c.id.desc())
    .limit(p("limit"))
    .offset(p("keep"))
)
#: Delete one job's runs of one status past its newest ``keep``, at most ``limit``;
#: never an unresolved run, nor one a chord's body still waits for.
DELETE_PAST_HISTORY_LIMIT = (
    sa.delete(OCC)
    .where(
        OCC.c.id.in_(_PAST_LIMIT.scalar_subquery()),
        OCC.c.status == p("status"),
        _RESOLVED,
        ~WAITED_ON_BY_A_CHORD,
    )
    .returning(OCC.c.id, OCC.c.trigger_key, json_member(OCC.c.links, "chord").label("chord"))
)

#: The chords the occurrences ``ids`` are members of (read before they are deleted).
CHORDS_OF_RUNS = _per_dialect(
    lambda dialect: (
        sa.select(json_member(OCC.c.links, "chord"))
        .where(_in_ids(OCC.c.id, dialect), OCC.c.links.is_not(None))
        .distinct()
    )
)

#: The oldest ``limit`` chords with an empty header closed before ``closed_before``: no
#: member names them, so retention finds them by age, one seek on ``chords_empty``.
EMPTY_CHORDS = DriverStatement(
    sa.select(chords.c.id)
    .where(sa.text(EMPTY_CHORD_WHERE), chords.c.closed_at < p("closed_before"))
    .order_by(chords.c.closed_at)
    .limit(p("limit"))
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
