"""Conditions on an occurrence row that several statements and reads share, defined once."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from kernel.db.schema import controls, occurrences
from kernel.states import CLAIMABLE, ControlState

__all__ = [
    "ATTEMPTS_LEFT",
    "CLAIMABLE_STATUS",
    "NOT_PAUSED",
    "OF_OCCURRENCE",
    "claimable_now",
    "lease_expired",
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

#: No paused control holds the occurrence (a paused one waits in retry_wait).
NOT_PAUSED = ~sa.exists().where(
    controls.c.occurrence_id == occurrences.c.id, controls.c.state == ControlState.PAUSED
)


def claimable_now(now: Any) -> sa.ColumnElement[bool]:
    """The occurrence is claimable at ``now`` (a value or a bind parameter): its status
    is claimable, its ``available_at`` has come, and no pause holds it. What a claim
    asks besides (a pool slot, the job allowing it, no unresolved run before it) is the
    caller's filter."""
    return sa.and_(CLAIMABLE_STATUS, occurrences.c.available_at <= now, NOT_PAUSED)


def lease_expired(now: Any) -> sa.ColumnElement[bool]:
    """The occurrence runs under a lease that expired by ``now`` (a value or a bind
    parameter): a claim may reclaim it, or its expiry settle it."""
    return sa.and_(occurrences.c.status == "running", occurrences.c.lease_expires_at <= now)
