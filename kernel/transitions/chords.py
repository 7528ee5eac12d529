"""The transition table's rows of chords: a chord's row is made with its members, counted
down by each member's success, failed once by a member that fails for good
(kernel/occurrences/chains.py). The state is the row's: ``open`` while ``remaining`` > 0
and not failed, ``complete`` at 0 (its body made), ``failed`` (its errbacks made)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kernel.events import EventType as E
from kernel.records import dumps, loads
from kernel.spec.enqueue_request import EnqueueRow
from kernel.spec.task_runs import replacement_of
from kernel.statements import (
    CHORD_MEMBER_FAILS,
    CHORD_MEMBER_HANDED_OVER,
    CHORD_MEMBER_SUCCEEDS,
    CHORD_MEMBERS,
    INSERT_CHORD,
)
from kernel.transaction.tx import Tx
from kernel.transitions import door
from kernel.transitions.door import Transition

__all__ = [
    "CHORD_TRANSITIONS",
    "ENQUEUE_MAKES_CHORD",
    "MEMBER_FAILS_CHORD",
    "MEMBER_HANDED_OVER",
    "MEMBER_SUCCEEDS_IN_CHORD",
    "hand_over",
    "pass_place",
]

NONE, OPEN, COMPLETE, FAILED = "none", "open", "complete", "failed"

ENQUEUE_MAKES_CHORD = Transition(
    (NONE,),
    "an enqueue of a chord's members (create)",
    (OPEN,),
    INSERT_CHORD,
    "unique chord id (an existing one is not made again); in the transaction that "
    "creates every member, each carrying the chord's id in its links",
    (),
)
MEMBER_SUCCEEDS_IN_CHORD = Transition(
    (OPEN,),
    "a member's settle succeeds",
    (OPEN, COMPLETE),
    CHORD_MEMBER_SUCCEEDS,
    "remaining > 0 and not failed: remaining - 1, the row held until that settle commits; "
    "the settle that reads 0 makes the body (TASK_ENQUEUED), the members' results first",
    (E.CHORD_COMPLETED,),
)
MEMBER_FAILS_CHORD = Transition(
    (OPEN,),
    "a member is dead-lettered or cancelled",
    (FAILED,),
    CHORD_MEMBER_FAILS,
    "remaining > 0 and not failed: failed_at set once; the body's errbacks made "
    "(TASK_ENQUEUED), the body's task id first; the body never",
    (E.CHORD_FAILED,),
)

MEMBER_HANDED_OVER = Transition(
    (OPEN,),
    "a member's replacement (Celery's self.replace), or the next step of a member that "
    "is a chain, is made",
    (OPEN,),
    CHORD_MEMBER_HANDED_OVER,
    "remaining > 0 and not failed, and the members as read: the member's place in "
    "group order is the run taking over (its replacement, its chain's next step or the "
    "body of a chord in that chain), whose result the body gets; the member counts nothing",
    (),
)

CHORD_TRANSITIONS: tuple[Transition, ...] = (
    ENQUEUE_MAKES_CHORD,
    MEMBER_SUCCEEDS_IN_CHORD,
    MEMBER_FAILS_CHORD,
    MEMBER_HANDED_OVER,
)


def hand_over(tx: Tx, rows: Sequence[EnqueueRow], made: Mapping[str, tuple[Any, ...]]) -> None:
    """Each run just ``made`` (idempotency key -> its id first) that took over a replaced
    chord member's task id takes its place among the chord's members (MEMBER_HANDED_OVER);
    a chord that failed meanwhile keeps its members."""
    for row in rows:
        taken = replacement_of(row.values["trigger_key"])
        chord_id = (loads(row.values["links"]) or {}).get("chord") if taken else None
        if taken is None or chord_id is None or row.key not in made:
            continue
        pass_place(tx, chord_id, taken[0], made[row.key][0])


def pass_place(tx: Tx, chord_id: str, holder: int, heir: int) -> None:
    """``heir`` takes ``holder``'s place among the open chord's members
    (MEMBER_HANDED_OVER); a chord that failed meanwhile keeps its members."""
    params: dict[str, Any] = {"chord_id": chord_id, "new_members": None}
    # Another member's hand-over may change the members between the read and the write:
    # the compare-and-set refuses it, and the members are read again.
    while (members := tx.conn.execute(CHORD_MEMBERS, params).scalar()) is not None:
        ids = [heir if m == holder else m for m in loads(members)]
        params = {**params, "members": members, "new_members": dumps(ids)}
        if door.run(tx, MEMBER_HANDED_OVER, params) is not None:
            break
