"""Why an unsettled occurrence is not claimable now: its blocker, named by SQL built from
the very predicates a claim filters and decides with (predicates, JOB_ALLOWS_CLAIM,
blocking_in_job, ROOM_IN_POOL), so the claim and ``why`` cannot disagree.

Each predicate is written for the ``occurrences`` table; here the occurrence asked about
is the alias ``waiting`` (the predicates are adapted to it), and ``occurrences`` is
another run of its job that may hold it back, as in BLOCKING_IN_JOB.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import bindparam as p
from sqlalchemy.sql.util import ClauseAdapter

from kernel.db.schema import events, occurrences
from kernel.events import EventType
from kernel.statements.claims import JOB_ALLOWS_CLAIM, blocking_in_job
from kernel.statements.pools import ROOM_IN_POOL
from kernel.statements.predicates import CLAIMABLE_STATUS, NOT_PAUSED, claimable_now

__all__ = ["BLOCKER_KINDS", "BLOCKERS", "STRANDED", "LAST_JOB_DISABLED"]

OCC = occurrences
W = occurrences.alias("waiting")


def _of_waiting(predicate: Any) -> Any:
    """``predicate`` about the occurrence asked about (``waiting``), not ``occurrences``."""
    return ClauseAdapter(W).traverse(predicate)


#: Every blocker, in the order they are named (the first that holds): what lasts until
#: a person acts first, then what passes by itself. ``none``: claimable now.
BLOCKER_KINDS = (
    "awaiting_approval",
    "awaiting_adjudication",
    "paused",
    "job_disabled",
    "not_before",
    "behind",
    "pool_full",
    "none",
)


def _first_in_job(unresolved: bool) -> sa.ScalarSelect[Any]:
    """The first run of the job that keeps ``waiting`` from starting, as the claim asks
    (claiming._job_blocks: only for an exclusive or at-most-once occurrence): one whose
    outcome waits for a verdict (``unresolved``), else one running or first in line."""
    other = blocking_in_job(
        W.c.job_id, W.c.id, W.c.exclusive, W.c.exclusive, p("now"), W.c.available_at
    )
    verdict = OCC.c.status == "needs_adjudication"
    return (
        sa.select(sa.func.min(OCC.c.id))
        .where(
            sa.or_(W.c.exclusive, W.c.delivery == "at-most-once"),
            other,
            verdict if unresolved else ~verdict,
        )
        .scalar_subquery()
    )


_unresolved_of = _first_in_job(unresolved=True)
_behind = _first_in_job(unresolved=False)

#: NULL for a running or settled occurrence: it waits for nothing.
_kind = sa.case(
    (W.c.status == "awaiting_approval", "awaiting_approval"),
    (W.c.status == "needs_adjudication", "awaiting_adjudication"),
    (~_of_waiting(CLAIMABLE_STATUS), sa.null()),
    (~_of_waiting(NOT_PAUSED), "paused"),
    (~_of_waiting(JOB_ALLOWS_CLAIM), "job_disabled"),
    (~_of_waiting(claimable_now(p("now"))), "not_before"),
    (_unresolved_of.is_not(None), "awaiting_adjudication"),
    (_behind.is_not(None), "behind"),
    (~_of_waiting(ROOM_IN_POOL), "pool_full"),
    else_="none",
)
#: The occurrence it waits for: itself awaiting a verdict, the unresolved run, the run ahead.
_waits_for = sa.case(
    (W.c.status == "needs_adjudication", W.c.id),
    (_unresolved_of.is_not(None), _unresolved_of),
    else_=_behind,
)

_blockers = sa.select(
    W.c.id,
    W.c.job_id,
    W.c.status,
    W.c.available_at,
    W.c.pool,
    W.c.fence,
    _kind.label("blocker"),
    _waits_for.label("waits_for"),
)

#: The blockers of the occurrences ``ids`` at ``now``.
BLOCKERS = _blockers.where(W.c.id.in_(p("ids", expanding=True))).order_by(W.c.id)

_stranded = _blockers.where(_of_waiting(CLAIMABLE_STATUS), W.c.available_at < p("since")).subquery()
#: Waiting occurrences that could have started before ``since`` and have no blocker at
#: ``now``: nothing holds them, yet no claim took them (the watchdog's ``stranded``).
STRANDED = (
    sa.select(_stranded)
    .where(_stranded.c.blocker == "none")
    .order_by(_stranded.c.available_at, _stranded.c.id)
    .limit(p("limit"))
)

#: The data of the job's latest ``job_disabled`` event: who or what disabled it.
LAST_JOB_DISABLED = (
    sa.select(events.c.data)
    .where(events.c.job_id == p("job_id"), events.c.type == EventType.JOB_DISABLED)
    .order_by(events.c.id.desc())
    .limit(1)
)
