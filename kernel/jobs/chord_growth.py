"""A chord that grows: an open chord's caller closes it (or abandons it), and a running
member adds members to its own chord (Celery's ``add_to_chord``).

An open chord (a generator's header) is made before its members, each counted in by the
transaction that enqueues it (kernel/jobs/enqueueing.py, ``chord["grow"]``); its body
waits for the close. Whichever transaction sees the chord closed with every member
settled makes the body, once: the close (each member settled before it) or the last
member's settle (kernel/occurrences/chains.py), both guarded statements on the chord's
row. A caller that fails while making the members abandons the chord: it fails as a
member's failure fails it. A caller that died leaves it ``growing``, which ``kernel why``
tells of each member (kernel/upkeep/canvas.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kernel import statements as st
from kernel.errors import InvalidArgument, NotFound
from kernel.jobs.enqueueing import Enqueued, EnqueueRequest, enqueue
from kernel.occurrences.chains import fail_chord, make_chord_body
from kernel.occurrences.runs import lease_lost
from kernel.records import loads
from kernel.transaction.tx import Tx
from kernel.transitions import chords as TC
from kernel.transitions import door

__all__ = ["abandon", "add_by_member", "close"]


def close(tx: Tx, chord_id: str) -> bool:
    """Close the open chord: its size is known. Whether its body was made now (every
    member had settled); not when it was closed before (a retried close) or failed
    meanwhile (a member's failure: its body's errbacks were made then).

    Raises:
        NotFound: no chord has that id.
    """
    row = door.run(tx, TC.CALLER_CLOSES_CHORD, {"chord_id": chord_id, "now": tx.now})
    if row is None:
        _exists(tx, chord_id)
        return False
    if row.remaining > 0:
        return False
    members = loads(row.members)
    last = members[-1] if members else None
    make_chord_body(tx, chord_id, row.members, row.body, last, parent_task_id="")
    return True


def abandon(tx: Tx, chord_id: str) -> bool:
    """The open chord's caller failed while making its members: the chord fails, its
    body's errbacks made and its body never. Whether it failed now (not when it was
    closed or failed before).

    Raises:
        NotFound: no chord has that id.
    """
    row = door.run(tx, TC.CALLER_ABANDONS_CHORD, {"chord_id": chord_id, "now": tx.now})
    if row is None:
        _exists(tx, chord_id)
        return False
    fail_chord(tx, chord_id, row.body, None, "", "abandoned")
    return True


def add_by_member(
    tx: Tx,
    occurrence_id: int,
    owner: str,
    fence: int,
    requests: Sequence[EnqueueRequest],
    defined: dict[str, dict[str, Any]],
    nested: Sequence[tuple[int, Mapping[str, Any]]] = (),
) -> list[Enqueued]:
    """The held run (fenced: its lease held until this commits) adds ``requests`` (and the
    chords ``nested``: :func:`~kernel.jobs.enqueueing.enqueue`'s) to its own chord, which
    counts them in; refused once the chord's body is made or it failed.

    Raises:
        LeaseLost: (owner, fence) no longer holds the lease; nothing is written.
        InvalidArgument: the run is in no chord, or its chord takes no more members.
    """
    params = {"occurrence_id": occurrence_id, "owner": owner, "held_fence": fence, "now": tx.now}
    held = tx.conn.execute(st.HOLDER_LINKS, params).first()
    if held is None:
        raise lease_lost(tx, occurrence_id, owner, fence)
    chord_id = (loads(held.links) or {}).get("chord")
    if chord_id is None:
        raise InvalidArgument(
            "occurrence_id",
            f"occurrence {occurrence_id} is no chord's member: only a chord's member adds "
            "members to its chord",
        )
    chord = {"id": chord_id, "grow": "member"}
    return enqueue(tx, requests, defined=defined, chord=chord, nested=nested)


def _exists(tx: Tx, chord_id: str) -> None:
    if tx.conn.execute(st.CHORD_ROW, {"chord_id": chord_id}).first() is None:
        raise NotFound(f"no chord {chord_id!r} exists", chord_id=chord_id)
