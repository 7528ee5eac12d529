"""An occurrence's place in a canvas (``kernel why OCCURRENCE``): read from the links the
kernel stores (kernel/spec/enqueue_request.py), its ``parent_id`` and its chord's row.

A step is told by what made it: its parent's callback (a chain's step or a ``link``),
its parent's errback (``link_error``), or its chord's body (made by the last member's
settle, its parent). The line of steps follows first callbacks: a routed chain stores
its next step first (celery_app/canvas_links.py), so "step 2 of 3" counts the
callbacks that made it and the first callbacks still to come; a plain ``link`` is one
more step in that count, as Celery runs it after the task as a chain would.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from kernel.db.schema import chords, events, occurrences
from kernel.errors import NotFound
from kernel.events import EventType
from kernel.records import loads, to_dt
from kernel.spec.task_runs import caller_key, chain_ids
from kernel.states import SETTLED
from kernel.transaction.tx import Tx
from kernel.transitions.chords import member_runs

__all__ = ["canvas"]

#: How far up a line of steps is walked (a chain deeper than this says "at least").
MAX_ANCESTORS = 100

_ROW = sa.select(
    occurrences.c.id,
    occurrences.c.job_id,
    occurrences.c.trigger_key,
    occurrences.c.status,
    occurrences.c.parent_id,
    occurrences.c.links,
)


def _row(tx: Tx, occurrence_id: int) -> Any:
    return tx.conn.execute(_ROW.where(occurrences.c.id == occurrence_id)).one_or_none()


def _task_id(row: Any) -> str:
    """Its Celery task id: its enqueue key, else its occurrence id."""
    return caller_key(str(row.trigger_key)) or str(row.id)


def _made_as(parent: Any, child: Any) -> str | None:
    """How ``parent``'s links made ``child``: ``callback``, ``errback`` or None (a key
    is a signature's task id, else ``<kind>:<parent>:<index>``)."""
    links = loads(parent.links) or {}
    key = caller_key(str(child.trigger_key)) or str(child.trigger_key)
    for kind in ("callbacks", "errbacks"):
        for index, sig in enumerate(links.get(kind) or ()):
            if key in (sig["options"].get("task_id"), f"{kind}:{parent.id}:{index}"):
                return kind[:-1]
    return None


def _iso(ms: int) -> str:
    return str(to_dt(ms)).replace(" ", "T")


def _chord(tx: Tx, chord_id: str) -> dict[str, Any] | None:
    row = tx.conn.execute(sa.select(chords).where(chords.c.id == chord_id)).one_or_none()
    if row is None:
        return None
    stored = loads(row.body)
    body = stored["callbacks"][0]
    members = loads(row.members)
    state = (
        "failed" if row.failed_at is not None
        else "growing" if row.closed_at is None
        else "open" if row.remaining
        else "complete"
    )  # fmt: skip
    return {
        "id": chord_id,
        # Counted as the chord counts them: a group a member's chain ends with, each.
        "members": len(member_runs(members)),
        "remaining": row.remaining,
        "state": state,
        "body_task": body["task"],
        "body_task_id": stored.get("result_id") or body["options"].get("task_id"),
        "member_ids": members,
        # A chord still growing (its caller making its members): since when it is open.
        "opened_at": _iso(row.created_at) if state == "growing" else None,
    }


def _replaced_by(tx: Tx, occurrence_id: int) -> list[int] | None:
    """The occurrences a run's replacement made (Celery's ``self.replace``), else None."""
    data = tx.conn.execute(
        sa.select(events.c.data).where(
            events.c.occurrence_id == occurrence_id,
            events.c.type == EventType.OCCURRENCE_REPLACED.value,
        )
    ).scalar()
    return None if data is None else list(loads(data)["replaced_by"])


def _steps_after(links: Mapping[str, Any] | None) -> int:
    """How many steps follow along first callbacks (a chain's next step carries the steps
    after it as its ``rest``: the last of them goes on)."""
    count, sig = 0, links
    while sig and sig.get("callbacks"):
        sig = sig["callbacks"][0]
        rest = sig.get("rest") or ()
        count, sig = count + 1 + len(rest), rest[-1] if rest else sig
    return count


def canvas(tx: Tx, occurrence_id: int) -> dict[str, Any] | None:
    """The occurrence's place in its canvas, None when it is in none (no parent, links
    or chord): ``role`` (``step``, ``errback``, ``chord member``, ``chord body``, or
    ``first step``), ``parent``, ``step``/``steps`` along its line, ``next`` (what its
    settle makes), ``chord`` (its row: members, remaining, state, body),
    ``replaced_by`` (what its ``self.replace`` made first), ``continued_by`` (the task
    ids of the chain's steps after it, which its success makes in turn) and
    ``waits_for``. Raises NotFound."""
    row = _row(tx, occurrence_id)
    if row is None:
        raise NotFound(f"occurrence {occurrence_id} does not exist", occurrence_id=occurrence_id)
    links = loads(row.links)
    parent = _row(tx, row.parent_id) if row.parent_id is not None else None
    made_as = _made_as(parent, row) if parent is not None else None
    chord = _chord(tx, links["chord"]) if links and links.get("chord") else None
    role = "first step"
    if chord is not None:
        role = "chord member"
    elif parent is not None and made_as is None and parent.links:
        parent_chord = (loads(parent.links) or {}).get("chord")
        chord = _chord(tx, parent_chord) if parent_chord else None
        if chord is not None and chord["body_task_id"] == _task_id(row):
            role = "chord body"
    if role == "first step" and made_as is not None:
        role = "step" if made_as == "callback" else "errback"
    replaced_by = _replaced_by(tx, row.id)
    if parent is None and not links and chord is None and replaced_by is None:
        return None
    step = 1
    walker, above = row, parent
    while above is not None and step <= MAX_ANCESTORS and _made_as(above, walker) == "callback":
        step += 1
        walker = above
        above = _row(tx, above.parent_id) if above.parent_id is not None else None
    after = _steps_after(links)
    return {
        "role": role,
        "task_id": _task_id(row),
        "parent": None
        if parent is None
        else {
            "occurrence_id": parent.id,
            "job_id": parent.job_id,
            "task_id": _task_id(parent),
            "status": parent.status,
        },
        "step": step,
        "steps": step + after,
        "next": _next(links),
        "continued_by": chain_ids((links or {}).get("callbacks") or ()),
        "chord": None if chord is None else _placed(chord, row.id),
        "replaced_by": replaced_by,
        "waits_for": (
            _waits_for(role, row.status, chord, links)
            if replaced_by is None
            else f"nothing: replaced by occurrence {', '.join(map(str, replaced_by))}"
        ),
    }


def _placed(chord: Mapping[str, Any], occurrence_id: int) -> dict[str, Any]:
    """The chord as told: its member's place in group order (None for the body)."""
    members = chord["member_ids"]
    told = {name: value for name, value in chord.items() if name != "member_ids"}
    told["member_index"] = next(
        (i for i, m in enumerate(members) if occurrence_id in member_runs([m])), None
    )
    return told


def _next(links: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """What its settle makes: each callback when it succeeds, each errback when it is
    dead-lettered."""
    made = []
    for kind, when in (("callbacks", "succeeds"), ("errbacks", "is dead-lettered")):
        for sig in (links or {}).get(kind) or ():
            step = {"task": sig["task"], "task_id": sig["options"].get("task_id"), "when": when}
            if "chord" in sig:  # a chord step: its members now, the body after them
                step["chord"] = sig["chord"]["id"]
                step["members"] = len(sig["chord"]["header"])
            made.append(step)
    return made


def _waits_for(
    role: str, status: str, chord: Mapping[str, Any] | None, links: Mapping[str, Any] | None
) -> str | None:
    """What the canvas waits for around it, in words."""
    if chord is not None and role == "chord member":
        body = f"{chord['body_task']} ({chord['body_task_id']})"
        if chord["state"] == "failed":
            return f"nothing: chord {chord['id']} failed; its body {body} is never made"
        if chord["state"] == "complete":
            return f"nothing: chord {chord['id']} completed and made its body {body}"
        if chord["state"] == "growing":
            return (
                f"chord {chord['id']}: its caller is still adding members (open since "
                f"{chord['opened_at']}); its body {body} is made once it closes and every "
                "member succeeded"
            )
        return (
            f"chord {chord['id']}: {chord['remaining']} of {chord['members']} members "
            f"still to succeed before its body {body} is made"
        )
    made = _next(links)
    if not made or status in SETTLED:
        return None
    return "its settle: " + "; ".join(
        f"chord {m['chord']}'s {m['members']} members are made when it {m['when']}, then "
        f"{m['task']}"
        if "chord" in m
        else f"{m['task']} is made when it {m['when']}"
        for m in made
    )
