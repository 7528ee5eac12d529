"""The transition table's rows of the limits a run counts against: pools and budgets
(see :mod:`kernel.transitions.occurrences`).

Their state is a counter, so a row's from and to name the condition its guard decides,
not a stored status: ``none`` is no row yet; a pool has ``room`` (running below its
limit) or is ``full``; a budget window has ``room`` for one more reservation under its
budget's limits or is ``spent``; a rate limit's token is ``free`` (its time has come) or
``taken``; a budget reservation is ``held`` (counted) or
``released``; a shared budget is ``defined``. A row that moves a counter without
deciding the condition lists every condition it may leave.
"""

from __future__ import annotations

from kernel.events import EventType as E
from kernel.statements.gates import (
    GIVE_BACK_BUDGET,
    OPEN_BUDGET_WINDOW,
    PRUNE_ENDED_WINDOWS,
    RECORD_RESERVATION,
    RELEASE_RESERVATION,
    RESERVE_BUDGET,
    SET_BUDGET,
    SETTLE_RESERVATION_UNITS,
    SETTLE_WINDOW_UNITS,
)
from kernel.statements.pools import (
    GIVE_BACK_POOL_SLOT,
    GIVE_BACK_RATE_TOKEN,
    RECONCILE_POOL,
    SET_POOL_LIMIT,
    TAKE_POOL_SLOT,
    TAKE_RATE_TOKEN,
)
from kernel.transitions.door import Transition

__all__ = [
    "OPERATOR_SETS_POOL_LIMIT",
    "CLAIM_TAKES_POOL_SLOT",
    "RUN_GIVES_BACK_POOL_SLOT",
    "UPKEEP_RECONCILES_POOL",
    "POOL_TRANSITIONS",
    "CLAIM_TAKES_RATE_TOKEN",
    "CLAIM_GIVES_BACK_RATE_TOKEN",
    "RATE_TRANSITIONS",
    "BUDGET_DEFINED",
    "FIRING_OPENS_BUDGET_WINDOW",
    "FIRING_RESERVES_BUDGET",
    "RESERVATION_RECORDED",
    "WINDOW_GIVES_BACK_RESERVATION",
    "RESERVATION_RELEASED",
    "RUN_SETTLES_WINDOW_UNITS",
    "RUN_SETTLES_RESERVATION_UNITS",
    "RETENTION_PRUNES_BUDGET_WINDOWS",
    "BUDGET_TRANSITIONS",
]

NONE, ROOM, FULL, SPENT = "none", "room", "full", "spent"
HELD, RELEASED, DEFINED = "held", "released", "defined"
FREE, TAKEN = "free", "taken"

OPERATOR_SETS_POOL_LIMIT = Transition(
    (NONE, ROOM, FULL),
    "operator or job file sets a pool's limit",
    (ROOM, FULL),
    SET_POOL_LIMIT,
    "a limit other than its own (the same one: nothing written); lowering it below the "
    "running count stops nothing",
    (E.POOL_LIMIT_SET,),
)
CLAIM_TAKES_POOL_SLOT = Transition(
    (NONE, ROOM),
    "a claim of an occurrence in the pool takes a slot",
    (ROOM, FULL),
    TAKE_POOL_SLOT,
    "running < limit under the pool row's lock (full: the claim is refused); a pool no "
    "row defines is made at its default limit with this slot taken",
    (),
)
RUN_GIVES_BACK_POOL_SLOT = Transition(
    (ROOM, FULL),
    "a run of the pool ends (settled, released, expired) or its claim fails",
    (ROOM, FULL),
    GIVE_BACK_POOL_SLOT,
    "running > 0 (a lowered limit may keep the pool full)",
    (),
)
UPKEEP_RECONCILES_POOL = Transition(
    (ROOM, FULL),
    "Beat's upkeep finds the counter off the slots its runs hold",
    (ROOM, FULL),
    RECONCILE_POOL,
    "counter still as read and still differing from the pool's running occurrences",
    (E.POOL_RECONCILED,),
)

POOL_TRANSITIONS: tuple[Transition, ...] = (
    OPERATOR_SETS_POOL_LIMIT,
    CLAIM_TAKES_POOL_SLOT,
    RUN_GIVES_BACK_POOL_SLOT,
    UPKEEP_RECONCILES_POOL,
)

CLAIM_TAKES_RATE_TOKEN = Transition(
    (NONE, FREE),
    "a claim of an occurrence with a rate limit takes its token",
    (TAKEN,),
    TAKE_RATE_TOKEN,
    "next_free_at <= now under the limit's row lock, then now + the run's interval (taken: "
    "the claim is refused, the occurrence waits until then); a limit with no row is made",
    (),
)
CLAIM_GIVES_BACK_RATE_TOKEN = Transition(
    (TAKEN,),
    "the claim that took the token did not take the run",
    (FREE,),
    GIVE_BACK_RATE_TOKEN,
    "next_free_at still what this claim set (no other claim took a token since)",
    (),
)

RATE_TRANSITIONS: tuple[Transition, ...] = (CLAIM_TAKES_RATE_TOKEN, CLAIM_GIVES_BACK_RATE_TOKEN)

BUDGET_DEFINED = Transition(
    (NONE, DEFINED),
    "a job file defines a shared budget",
    (DEFINED,),
    SET_BUDGET,
    "upsert of its window and limits; its windows' counts stay",
    (),
)
FIRING_OPENS_BUDGET_WINDOW = Transition(
    (NONE,),
    "a firing of a job with a budget: its current window",
    (ROOM, SPENT),
    OPEN_BUDGET_WINDOW,
    "no window of the budget at this start yet (else nothing written)",
    (),
)
FIRING_RESERVES_BUDGET = Transition(
    (ROOM,),
    "a firing reserves one run and one unit",
    (ROOM, SPENT),
    RESERVE_BUDGET,
    "runs + 1 <= max_runs and units + 1 <= max_units (NULL: no limit), under the window "
    "row's lock; spent: the firing is skipped (budget)",
    (),
)
RESERVATION_RECORDED = Transition(
    (NONE,),
    "the firing's occurrence is made: it holds the reservation",
    (HELD,),
    RECORD_RESERVATION,
    "one per occurrence (its id is the key)",
    (),
)
WINDOW_GIVES_BACK_RESERVATION = Transition(
    (ROOM, SPENT),
    "a reservation ends uncounted (no occurrence took it, or released)",
    (ROOM, SPENT),
    GIVE_BACK_BUDGET,
    "the window of the reservation; its run and units no longer count",
    (),
)
RESERVATION_RELEASED = Transition(
    (HELD,),
    "its occurrence ends without running (cancelled waiting, rejected, approval timeout)",
    (RELEASED,),
    RELEASE_RESERVATION,
    "not released yet; its window then gives it back (WINDOW_GIVES_BACK_RESERVATION)",
    (E.BUDGET_RELEASED,),
)
RUN_SETTLES_WINDOW_UNITS = Transition(
    (ROOM, SPENT),
    "a succeeded run reports the units it used",
    (ROOM, SPENT),
    SETTLE_WINDOW_UNITS,
    "the window of the occurrence's held reservation counts the reported units instead of "
    "the reserved ones (it may pass max_units)",
    (),
)
RUN_SETTLES_RESERVATION_UNITS = Transition(
    (HELD,),
    "a succeeded run reports the units it used",
    (HELD,),
    SETTLE_RESERVATION_UNITS,
    "held (not released); after RUN_SETTLES_WINDOW_UNITS, which reads it",
    (),
)
RETENTION_PRUNES_BUDGET_WINDOWS = Transition(
    (ROOM, SPENT),
    "retention deletes budget windows that ended long ago",
    (NONE,),
    PRUNE_ENDED_WINDOWS,
    "began before the cutoff (two of the longest windows ago); at most limit per pass",
    (),
)

BUDGET_TRANSITIONS: tuple[Transition, ...] = (
    BUDGET_DEFINED,
    FIRING_OPENS_BUDGET_WINDOW,
    FIRING_RESERVES_BUDGET,
    RESERVATION_RECORDED,
    WINDOW_GIVES_BACK_RESERVATION,
    RESERVATION_RELEASED,
    RUN_SETTLES_WINDOW_UNITS,
    RUN_SETTLES_RESERVATION_UNITS,
    RETENTION_PRUNES_BUDGET_WINDOWS,
)
