"""The transition table's rows of chords: a chord's row is made with its members, counted
down by each member's success, failed once by a member that fails for good
(kernel/occurrences/chains.py). The state is the row's: ``growing`` while its caller
still makes its members (``closed_at`` NULL: a generator's header, counted in member by
member), ``open`` while closed with ``remaining`` > 0 and not failed, ``complete`` at 0
when closed (its body made), ``failed`` (its errbacks made: :func:`body_errbacks`). A
running member may add members (Celery's add_to_chord) until the body is made
(kernel/jobs/chord_growth.py). Retention deletes a done chord's row with the last of its
members."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kernel.errors import InvalidArgument
from kernel.events import EventType as E
from kernel.records import dumps, loads
from kernel.spec.enqueue_request import EnqueueRequest, EnqueueRow
from kernel.spec.link_runs import link_requests
from kernel.spec.task_runs import replacement_of
from kernel.statements import (
    CHORD_ABANDONED,
    CHORD_CLOSES,
    CHORD_GROWS,
    CHORD_MEMBER_ADDS,
    CHORD_MEMBER_FAILS,
    CHORD_MEMBER_HANDED_OVER,
    CHORD_MEMBER_SUCCEEDS,
    CHORD_MEMBERS,
    CHORD_ROW,
    DELETE_FORGOTTEN_CHORDS,
    INSERT_CHORD,
)
from kernel.transaction.tx import Tx
from kernel.transitions import door
from kernel.transitions.door import Transition

__all__ = [
    "CALLER_ABANDONS_CHORD",
    "CALLER_CLOSES_CHORD",
    "CALLER_GROWS_CHORD",
    "CHORD_TRANSITIONS",
    "ENQUEUE_MAKES_CHORD",
    "MEMBER_ADDS_TO_CHORD",
    "MEMBER_FAILS_CHORD",
    "MEMBER_HANDED_OVER",
    "MEMBER_SUCCEEDS_IN_CHORD",
    "RETENTION_FORGETS_CHORDS",
    "body_errbacks",
    "grow",
    "hand_over",
    "in_place",
    "member_runs",
    "pass_place",
]

NONE, GROWING, OPEN = "none", "growing", "open"
COMPLETE, FAILED = "complete", "failed"

ENQUEUE_MAKES_CHORD = Transition(
    (NONE,),
    "an enqueue of a chord's members (create), or of an open chord's first ones",
    (GROWING, OPEN, COMPLETE),
    INSERT_CHORD,
    "unique chord id (an existing one is not made again); in the transaction that "
    "creates every member, each carrying the chord's id in its links; closed with no "
    "member (an empty header), it makes the body at once, with []",
    (E.CHORD_COMPLETED,),
)
CALLER_GROWS_CHORD = Transition(
    (GROWING,),
    "its caller enqueues the next members of an open chord",
    (GROWING,),
    CHORD_GROWS,
    "not closed, not failed, and the members as read: remaining + the members made in "
    "this transaction, appended in order",
    (),
)
MEMBER_ADDS_TO_CHORD = Transition(
    (GROWING, OPEN),
    "a running member adds members (Celery's add_to_chord), its fence held",
    (GROWING, OPEN),
    CHORD_MEMBER_ADDS,
    "remaining > 0 (the adding member has not settled: no body yet), not failed, and "
    "the members as read: remaining + the members made, appended",
    (),
)
CALLER_CLOSES_CHORD = Transition(
    (GROWING,),
    "its caller has made every member of an open chord",
    (OPEN, COMPLETE),
    CHORD_CLOSES,
    "not closed and not failed: closed_at set; reading remaining 0 (every member settled "
    "before), the close makes the body, else the last member's settle does",
    (E.CHORD_COMPLETED,),
)
CALLER_ABANDONS_CHORD = Transition(
    (GROWING,),
    "its caller failed while making an open chord's members",
    (FAILED,),
    CHORD_ABANDONED,
    "not closed and not failed: failed_at set; the body's errbacks made, the body never",
    (E.CHORD_FAILED,),
)
MEMBER_SUCCEEDS_IN_CHORD = Transition(
    (GROWING, OPEN),
    "a member's settle succeeds",
    (GROWING, OPEN, COMPLETE),
    CHORD_MEMBER_SUCCEEDS,
    "remaining > 0 and not failed: remaining - 1, the row held until that settle commits; "
    "the settle that reads 0 of a closed chord makes the body (TASK_ENQUEUED), the "
    "members' results first",
    (E.CHORD_COMPLETED,),
)
MEMBER_FAILS_CHORD = Transition(
    (GROWING, OPEN),
    "a member is dead-lettered, cancelled or skipped expired (Celery revokes it)",
    (FAILED,),
    CHORD_MEMBER_FAILS,
    "remaining > 0 and not failed: failed_at set once; the body's errbacks made "
    "(TASK_ENQUEUED), the body's task id first; the body never",
    (E.CHORD_FAILED,),
)

MEMBER_HANDED_OVER = Transition(
    (GROWING, OPEN),
    "a member's replacement (Celery's self.replace), the next step of a member that "
    "is a chain, or the body of a member that is a chord, is made",
    (GROWING, OPEN),
    CHORD_MEMBER_HANDED_OVER,
    "remaining > 0 and not failed, and the members as read: the member's place in "
    "group order is the runs taking over (its replacement, its chain's next step, the "
    "body of a chord in that chain or that is the member, each member of a group its "
    "chain ends with: remaining + their number - 1), whose results the body gets",
    (),
)

RETENTION_FORGETS_CHORDS = Transition(
    (COMPLETE, FAILED),
    "retention deleted the last of its members (kernel/upkeep/history.py)",
    (NONE,),
    DELETE_FORGOTTEN_CHORDS,
    "done (body made, or failed) and none of its members exists: nothing settles, hands "
    "over, grows or tells of it again; a growing chord, or one with a member left, is kept",
    (),
)

CHORD_TRANSITIONS: tuple[Transition, ...] = (
    ENQUEUE_MAKES_CHORD,
    CALLER_GROWS_CHORD,
    MEMBER_ADDS_TO_CHORD,
    CALLER_CLOSES_CHORD,
    CALLER_ABANDONS_CHORD,
    MEMBER_SUCCEEDS_IN_CHORD,
    MEMBER_FAILS_CHORD,
    MEMBER_HANDED_OVER,
    RETENTION_FORGETS_CHORDS,
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
        pass_place(tx, chord_id, taken[0], [made[row.key][0]])


def pass_place(
    tx: Tx, chord_id: str, holder: int | str, heirs: Sequence[int], *, grouped: bool = False
) -> None:
    """``heirs`` take ``holder``'s place among the open chord's members (MEMBER_HANDED_OVER),
    each counted; ``grouped`` (a group a member's chain ends with): as one list in that
    place, whose results the body gets as one list there, as Celery's. A chord that failed
    meanwhile keeps its members. ``holder``: a run, or the ``chord:<id>`` a chord as a
    member holds its place with until its body is made."""
    taking: list[Any] = [list(heirs)] if grouped else list(heirs)
    params: dict[str, Any] = {"chord_id": chord_id, "new_members": None, "added": len(heirs) - 1}
    # Another member's hand-over may change the members between the read and the write:
    # the compare-and-set refuses it, and the members are read again.
    while (members := tx.conn.execute(CHORD_MEMBERS, params).scalar()) is not None:
        ids = _replaced(loads(members), holder, taking)
        params = {**params, "members": members, "new_members": dumps(ids)}
        if door.run(tx, MEMBER_HANDED_OVER, params) is not None:
            break


def _replaced(members: list[Any], holder: int | str, taking: list[Any]) -> list[Any]:
    return [
        one
        for m in members
        for one in (
            taking
            if m == holder
            else [_replaced(m, holder, taking)]
            if isinstance(m, list)
            else [m]
        )
    ]


def member_runs(members: list[Any]) -> list[int]:
    """The runs among a chord's ``members`` (a group a member's chain ends with: a list)."""
    return [one for m in members for one in (member_runs(m) if isinstance(m, list) else [m])]


def in_place(members: list[Any], results: Mapping[int, Any]) -> list[Any]:
    """The members' ``results`` (run -> stored JSON) in their places, a group's as a list."""
    return [in_place(m, results) if isinstance(m, list) else loads(results.get(m)) for m in members]


def grow(tx: Tx, chord_id: str, added: Sequence[int | str], *, by_member: bool) -> None:
    """Count the runs ``added`` (made in this transaction, in order) into the chord, as
    its caller's next members of an open chord, or ``by_member`` (add_to_chord).

    Raises:
        InvalidArgument: the chord does not exist, is closed (its caller's), has its
            body made or failed; the transaction is to be rolled back.
    """
    if not added:
        return  # every run was made before (a replayed enqueue): counted in then
    transition = MEMBER_ADDS_TO_CHORD if by_member else CALLER_GROWS_CHORD
    # A replacement or another member's addition may change the members between the
    # read and the write: the compare-and-set refuses it, and the row is read again.
    while (row := tx.conn.execute(CHORD_ROW, {"chord_id": chord_id}).first()) is not None:
        params = {
            "chord_id": chord_id, "members": row.members, "added": len(added),
            "new_members": dumps([*loads(row.members), *added]),
        }  # fmt: skip
        if door.run(tx, transition, params) is not None:
            return
        if row.failed_at is not None or (row.closed_at is not None and not by_member):
            break
        if by_member and row.remaining == 0:
            break
    raise InvalidArgument("chord.id", _why_not_grown(chord_id, row))


def _why_not_grown(chord_id: str, row: Any) -> str:
    if row is None:
        return f"no chord {chord_id!r} exists: open it first (its enqueue with open=True)"
    if row.failed_at is not None:
        return f"chord {chord_id!r} failed: it takes no more members"
    if row.remaining == 0 and row.closed_at is not None:
        return f"chord {chord_id!r} has made its body: it takes no more members"
    return f"chord {chord_id!r} is closed: only its running members may add members"


def body_errbacks(
    stored: Mapping[str, Any], chord_id: str, parent: int | str, body_task_id: str,
    told: Sequence[Any] = (),
) -> tuple[list[EnqueueRequest], list[str]]:  # fmt: skip
    """The errbacks a failed chord's ``stored`` body gives (``parent``: the run whose end
    failed it, else the chord; but those in ``told``), and the ids of its results: one body's under
    ``body_task_id``; a group body's, each member's own under that member's result id (a
    chord's among them: its body's, which carries that chord's errbacks), as Celery's
    backend calls each task's of a group body."""
    grouped = bool(stored.get("group"))
    errbacks: list[EnqueueRequest] = []
    bodies = []
    for index, sig in enumerate(stored["callbacks"]):
        own = (sig.get("chord") or {}).get("result_id") or sig["options"]["task_id"]
        task_id = own if grouped else body_task_id
        bodies.append(task_id)
        errbacks += link_requests(
            dumps({"callbacks": [], "errbacks": [e for e in sig["errbacks"] if e not in told]}),
            succeeded=False,
            result=None,
            parent_id=parent,
            parent_task_id=task_id,
            # Keyed by the chord (and the body's member): the failed member's own
            # errbacks are keyed by it.
            stem=f"chord-errbacks:{chord_id}" + (f":{index}" if grouped else ""),
        )
    return errbacks, bodies
