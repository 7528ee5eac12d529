"""Conditions on an occurrence row that several statements and reads share, defined once."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from kernel.db.json_text import json_member
from kernel.db.schema import chords, controls, occurrences
from kernel.states import CLAIMABLE, ControlState

__all__ = [
    "ATTEMPTS_LEFT",
    "CLAIMABLE_STATUS",
    "LOST_LEASES_LEFT",
    "NOT_PAUSED",
    "OF_OCCURRENCE",
    "WAITED_ON_BY_A_CHORD",
    "before_deadline",
    "claimable_now",
    "deadline_passed",
    "lease_expired",
    "start_expired",
    "status_is",
]

#: The bind of an occurrence's id in an UPDATE of a table that has an ``occurrence_id``
#: column (controls, budget reservations, adjudication asks); every other statement binds
#: ``occurrence_id``. Executed with a key named like a column of the table it updates,
#: SQLAlchemy takes the key for "SET that column" and refuses a bind of that name (a
#: statement run on the driver, as TERMINATE_CONTROL, passes its keys as they are).
OF_OCCURRENCE = "of_occurrence"

#: The status is one a claim may take (:data:`kernel.states.CLAIMABLE`). Literals, not
#: an expanding IN, so the driver form of a statement is rendered once.
CLAIMABLE_STATUS = occurrences.c.status.in_([sa.literal(s.value) for s in CLAIMABLE])

#: An attempt remains: where the kernel decides "attempts left" (a claim that spends one,
#: a lease expiry, a settle's retry). :func:`kernel.spec.retry.attempts_left` mirrors it
#: for the settle's pure decision.
ATTEMPTS_LEFT = occurrences.c.attempt < occurrences.c.max_attempts

#: A lost lease may be reclaimed: fewer reclaims after an expired lease than the run's
#: bound (a poison pill past it: lease expiry dead-letters it). A reclaim spends no attempt.
LOST_LEASES_LEFT = occurrences.c.lost_leases < occurrences.c.max_lost_leases

#: No paused control holds the occurrence (a paused one waits in retry_wait).
NOT_PAUSED = ~sa.exists().where(
    controls.c.occurrence_id == occurrences.c.id, controls.c.state == ControlState.PAUSED
)


def claimable_now(now: Any, *, literal_status: bool = False) -> sa.ColumnElement[bool]:
    """The occurrence is claimable at ``now`` (a value or a bind parameter): its status
    is claimable, its ``available_at`` has come, its start deadline has not, and no pause
    holds it. What a claim asks besides (a pool slot, the job allowing it, no unresolved
    run before it) is the caller's filter. ``literal_status`` as for :func:`lease_expired`."""
    status = status_is(*(s.value for s in CLAIMABLE)) if literal_status else CLAIMABLE_STATUS
    return sa.and_(status, occurrences.c.available_at <= now, before_deadline(now), NOT_PAUSED)


def before_deadline(now: Any) -> sa.ColumnElement[bool]:
    """The occurrence has no start deadline (``expires_at``, Celery's ``expires``), or
    ``now`` is before it."""
    return sa.or_(occurrences.c.expires_at.is_(None), occurrences.c.expires_at > now)


def deadline_passed(now: Any) -> sa.ColumnElement[bool]:
    """A waiting occurrence whose start deadline came by ``now``, paused or not."""
    return sa.and_(CLAIMABLE_STATUS, occurrences.c.expires_at <= now)


def start_expired(now: Any) -> sa.ColumnElement[bool]:
    """A waiting occurrence whose start deadline came by ``now``: it is never started, the
    first claim or upkeep that meets it settles it skipped ``expired``. A paused one
    waits for its operator; resumed, it is expired then."""
    return sa.and_(deadline_passed(now), NOT_PAUSED)


def status_is(*states: str) -> sa.ColumnElement[bool]:
    """The occurrence is in one of ``states``, written into the statement's text: SQLite
    uses a partial index (``occurrences_running``, ...) only for a predicate it can prove
    from the text, which a bound parameter is not; reads that must not walk history use it."""
    literals = [sa.literal(str(state), literal_execute=True) for state in states]
    if len(literals) == 1:
        return occurrences.c.status == literals[0]
    return occurrences.c.status.in_(literals)


def lease_expired(now: Any, *, literal_status: bool = False) -> sa.ColumnElement[bool]:
    """The occurrence runs under a lease that expired by ``now`` (a value or a bind
    parameter): a claim may reclaim it, or its expiry settle it. ``literal_status`` writes
    the status into the text (:func:`status_is`), for reads run by SQLAlchemy that must
    use SQLite's partial index; a statement compiled once for the driver keeps it bound."""
    running = status_is("running") if literal_status else occurrences.c.status == "running"
    return sa.and_(running, occurrences.c.lease_expires_at <= now)


#: A run that names a chord whose body is not made yet (members to come, or still
#: growing): its result is among the body's arguments, read when it is made, so
#: retention keeps it (a chain step that handed its place on too, briefly). One seek on
#: the chord's key per run asked about.
WAITED_ON_BY_A_CHORD = sa.exists().where(
    chords.c.id == json_member(occurrences.c.links, "chord"),
    chords.c.failed_at.is_(None),
    sa.or_(chords.c.remaining > 0, chords.c.closed_at.is_(None)),
)
