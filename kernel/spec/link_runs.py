"""The runs and chords a settled run's links make, from the links JSON that
:func:`kernel.spec.enqueue_request.checked_links` checked when the run was enqueued: its
callbacks after a success, its errbacks after a dead letter, the chords among its callbacks
(a chord step's members, some of them chords in turn, and its row's body). Pure: no database.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kernel.records import dumps, loads
from kernel.spec.enqueue_request import EnqueueRequest, signature_request

__all__ = ["ChordStep", "chord_step", "chord_steps", "link_requests"]


def link_requests(
    links_json: str, *, succeeded: bool, result: Any, parent_id: int | str,
    parent_task_id: str, stem: str | None = None,
) -> list[EnqueueRequest]:  # fmt: skip
    """The runs a settled run's links make: its callbacks after a success (``result``
    first unless immutable), else its errbacks (``parent_task_id`` first unless
    immutable), their parent ``parent_task_id``. Pure: checked when enqueued. ``stem``:
    the keys' start before each link's place, when not the parent's own (``errbacks:<id>``):
    a failed chord's errbacks are its own, not those of the member that failed it."""
    links = loads(links_json)
    kind = "callbacks" if succeeded else "errbacks"
    first = [result] if succeeded else [parent_task_id]
    stem = stem or f"{kind}:{parent_id}"
    return [
        signature_request(sig["task"], sig, sig["options"], sig["settings"],
                 () if sig["immutable"] else first, f"{stem}:{index}", parent_task_id)
        for index, sig in enumerate(links[kind])
        if "chord" not in sig
    ]  # fmt: skip


@dataclass(frozen=True, slots=True)
class ChordStep:
    """A chord a settled run's callback (or an enqueue) makes: its id, its members (runs, or
    chords whose body's end is the member's), its row's body (links JSON), and whether it
    ``continues`` the run (its body then takes the run's place in the run's chord)."""

    chord_id: str
    members: list[EnqueueRequest | ChordStep]
    body: str
    continues: bool = False


def chord_steps(links_json: str, *, result: Any, parent_task_id: str) -> list[ChordStep]:
    """The chords a succeeded run's callbacks make (:func:`link_requests` makes the
    others): :func:`chord_step` of each, ``result`` first."""
    return [chord_step(sig, [result], parent_task_id)
            for sig in loads(links_json)["callbacks"] if "chord" in sig]  # fmt: skip


def chord_step(
    sig: Mapping[str, Any], first: Sequence[Any], parent_task_id: str | None
) -> ChordStep:
    """The chord of a checked signature carrying one: each header member keyed by its task
    id, else by the chord and place, ``first`` before its arguments unless immutable, its
    parent ``parent_task_id``, its group the chord (``group_id``, ``group_index``); a member
    that is a chord is made alike, given ``first`` as Celery's chord gives its header."""
    chord = sig["chord"]
    members: list[EnqueueRequest | ChordStep] = []
    for index, m in enumerate(chord["header"]):
        if "chord" in m:
            members.append(chord_step(m, first, parent_task_id))
            continue
        request = {**m.get("request", {}), "group_id": chord["id"], "group_index": index}
        members.append(signature_request(
            m["task"], {**m, "request": request}, m["options"], m["settings"],
            () if m["immutable"] else first, f"chord:{chord['id']}:{index}", parent_task_id,
        ))  # fmt: skip
    body = {name: value for name, value in sig.items() if name != "chord"}
    if "then" in chord:  # the body is itself a chord's: made as a chord step
        body["chord"] = chord["then"]
    group = {"callbacks": [body, *chord["group"]], "group": True} if "group" in chord else {}
    stored = {"callbacks": [body], "errbacks": [], "result_id": chord.get("result_id"), **group}
    return ChordStep(chord["id"], members, dumps(stored), bool(sig.get("continues")))
