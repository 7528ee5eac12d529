"""The transition table's rows of chords: a chord's row is made with its members, counted
down by each member's success, failed once by a member that fails for good
(kernel/occurrences/chains.py). The state is the row's: ``open`` while ``remaining`` > 0
and not failed, ``complete`` at 0 (its body made), ``failed`` (its errbacks made)."""

from __future__ import annotations

from kernel.events import EventType as E
from kernel.statements import CHORD_MEMBER_FAILS, CHORD_MEMBER_SUCCEEDS, INSERT_CHORD
from kernel.transitions.door import Transition

__all__ = [
    "CHORD_TRANSITIONS",
    "ENQUEUE_MAKES_CHORD",
    "MEMBER_FAILS_CHORD",
    "MEMBER_SUCCEEDS_IN_CHORD",
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

CHORD_TRANSITIONS: tuple[Transition, ...] = (
    ENQUEUE_MAKES_CHORD,
    MEMBER_SUCCEEDS_IN_CHORD,
    MEMBER_FAILS_CHORD,
)
