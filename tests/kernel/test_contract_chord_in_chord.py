"""A chord as a chord's member (issue 40): its place among the outer chord's members is
held by ``chord:<id>`` until the inner chord's body is made, which takes it; a chain ending
in a group hands its place to each of the group's members (``shares``), the outer chord
counting one more each, their results one list in its place. The outer body is
made once, with each inner end's result in its place, as Celery counts a chord by its body;
an inner chord that fails for good fails the outer one. On SQLite and PostgreSQL."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from kernel import EnqueueRequest, InvalidArgument

if TYPE_CHECKING:
    from kernel.types import Occurrence
    from tests.kernel.conftest import Harness

ONCE = {"max_attempts": 1, "max_lost_leases": 0}


def _step(task_id: str, *args: Any, **more: Any) -> dict[str, Any]:
    return {"task": "proj.add", "args": list(args), "options": {"task_id": task_id}, **more}


def _chord(chord_id: str, header: list[dict[str, Any]], body: dict[str, Any]) -> dict[str, Any]:
    """Celery's ``chord(header, body)`` as a link: the body carrying the chord."""
    return {**body, "chord": {"id": chord_id, "header": header}}


def _keyed(k: Harness, task_id: str) -> Occurrence:
    [found] = [o for o in k.kernel.list_occurrences(limit=500) if o.trigger_key == f"key:{task_id}"]
    return found


def _made(k: Harness, task_id: str) -> bool:
    return any(o.trigger_key == f"key:{task_id}" for o in k.kernel.list_occurrences(limit=500))


def _succeed(k: Harness, task_id: str, result: Any) -> None:
    occurrence_id = _keyed(k, task_id).id
    claim = k.kernel.claim(occurrence_id, owner="w1", lease=30)
    assert claim is not None
    k.kernel.succeed(occurrence_id, owner="w1", fence=claim.fence, result=result)


def _fail(k: Harness, task_id: str) -> None:
    occurrence_id = _keyed(k, task_id).id
    claim = k.kernel.claim(occurrence_id, owner="w1", lease=30)
    assert claim is not None
    k.kernel.fail(
        occurrence_id, owner="w1", fence=claim.fence, code="E", message="x", retryable=False
    )


def _completed(k: Harness) -> list[str]:
    return [e.data["chord_id"] for e in k.kernel.events() if e.type == "chord_completed"]


def _outer_with_inner(k: Harness, inner_body: Any, **settings: Any) -> None:
    """``chord([m0, chord([i0, i1], inner_body), m2], body)``."""
    members = [
        EnqueueRequest("proj.add", args=[0], key="m0", settings=settings),
        EnqueueRequest("proj.add", args=[2], key="m2", settings=settings),
    ]
    inner = _chord("inner", [_step("i0", 10, settings=settings), _step("i1", 11)], inner_body)
    errback = {"task": "proj.on_error", "options": {"task_id": "eb"}}
    k.kernel.enqueue_many(
        members,
        chord={"id": "outer", "body": _step("body", "x", errbacks=[errback])},
        nested=[(1, inner)],
    )


def test_a_chord_member_is_counted_by_its_body_in_its_place(k: Harness) -> None:
    _outer_with_inner(k, _step("ib", "y"))
    _succeed(k, "m0", 0)
    _succeed(k, "m2", 2)
    _succeed(k, "i1", 11)
    assert not _made(k, "ib")
    # ``why`` of an inner member: its own chord; the outer one waits on that chord's place.
    inner = k.kernel.canvas(_keyed(k, "i0").id)
    assert inner is not None and inner["chord"]["id"] == "inner"
    _succeed(k, "i0", 10)
    # The inner chord's members made it: its results first.
    assert _keyed(k, "ib").payload["args"] == [[10, 11], "y"]
    assert not _made(k, "body")
    _succeed(k, "ib", 21)
    assert _keyed(k, "body").payload["args"] == [[0, 21, 2], "x"]
    assert _completed(k) == ["inner", "outer"]


def test_an_inner_chord_failing_fails_the_outer_chord_once(k: Harness) -> None:
    _outer_with_inner(k, _step("ib", rest=[_step("after")]), **ONCE)
    _succeed(k, "m0", 0)
    _fail(k, "i0")
    _succeed(k, "i1", 11)
    _succeed(k, "m2", 2)
    assert not _made(k, "ib") and not _made(k, "body")
    # The outer body's errback, once, given the body's task id.
    assert _keyed(k, "eb").payload["args"] == ["body"]
    failed = [e.data for e in k.kernel.events() if e.type == "chord_failed"]
    assert [f["chord_id"] for f in failed] == ["inner", "outer"]
    # The steps of a chain after the inner body fail with it (the worker writes them).
    assert [f.get("chain_task_ids") for f in failed] == [["after"], None]


def test_an_errback_both_chords_carry_is_made_once(k: Harness) -> None:
    """Celery links a chord's errback to a chord in its header too, and calls it once."""
    errback = {"task": "proj.on_error", "immutable": True}
    inner = _chord("inner", [_step("i0", settings=ONCE)], _step("ib", errbacks=[errback]))
    body = _step("body", errbacks=[errback, {**errback, "task": "proj.other"}])
    k.kernel.enqueue_many([], chord={"id": "outer", "body": body}, nested=[(0, inner)])
    _fail(k, "i0")
    errbacks = [
        o.job_id for o in k.kernel.list_occurrences(limit=50) if o.job_id != "task:proj.add"
    ]
    assert sorted(errbacks) == ["task:proj.on_error", "task:proj.other"]


def test_chords_nest_as_deep_as_celery_s(k: Harness) -> None:
    """``group([group([group([a]) | b]) | c]) | d``: a chord in a chord in a chord."""
    deepest = _chord("c3", [_step("a", 1, 2)], _step("b", [3]))
    middle = {**_step("c", [4]), "chord": {"id": "c2", "header": [deepest]}}
    k.kernel.enqueue_many([], chord={"id": "c1", "body": _step("d", [6])}, nested=[(0, middle)])
    _succeed(k, "a", 3)
    assert _keyed(k, "b").payload["args"] == [[3], [3]]
    _succeed(k, "b", [3, 3])
    assert _keyed(k, "c").payload["args"] == [[[3, 3]], [4]]
    _succeed(k, "c", [[3, 3], 4])
    assert _keyed(k, "d").payload["args"] == [[[[3, 3], 4]], [6]]
    assert _completed(k) == ["c3", "c2", "c1"]


def test_a_member_chain_ending_in_a_group_counts_each_of_its_members(k: Harness) -> None:
    """``chord([m0, chain(a, group(g0, g1))], body)``: the group's members take a's place,
    each counted, their results one list there (Celery's ``[[42, 42]]``)."""
    group = [_step("g0", 1, shares=True), _step("g1", 2, shares=True)]
    members = [
        EnqueueRequest("proj.add", args=[0], key="m0"),
        EnqueueRequest("proj.add", args=[1], key="a", callbacks=group),
    ]
    k.kernel.enqueue_many(members, chord={"id": "outer", "body": _step("body")})
    _succeed(k, "m0", 0)
    _succeed(k, "a", 1)
    assert _keyed(k, "g0").payload["args"] == [1, 1]
    _succeed(k, "g1", 3)
    assert not _made(k, "body")
    # ``why``: the group's member in the chain's place, each counted.
    story = k.kernel.canvas(_keyed(k, "g0").id)
    assert story is not None
    chord = story["chord"]
    assert (chord["member_index"], chord["members"], chord["remaining"]) == (1, 3, 1)
    _succeed(k, "g0", 2)
    assert _keyed(k, "body").payload["args"] == [[0, [2, 3]]]


def test_a_chord_step_s_member_may_be_a_chord(k: Harness) -> None:
    """``chain(a, chord([chord([i0], ib), m1], body))``: made by a's settle, a's result
    first in every member (the inner chord's too, as Celery's chord gives its header)."""
    inner = _chord("inner", [_step("i0", 10)], _step("ib"))
    step = _chord("outer", [inner, _step("m1", 20)], _step("body"))
    k.kernel.enqueue(task="proj.add", args=[1], key="a", callbacks=[step])
    _succeed(k, "a", 1)
    assert _keyed(k, "i0").payload["args"] == [1, 10]
    assert _keyed(k, "m1").payload["args"] == [1, 20]
    _succeed(k, "m1", 21)
    _succeed(k, "i0", 11)
    _succeed(k, "ib", [11])
    assert _keyed(k, "body").payload["args"] == [[[11], 21]]


def test_a_group_s_member_may_be_a_chord_with_no_place_to_take(k: Harness) -> None:
    inner = _chord("inner", [_step("i0", 10)], _step("ib", rest=[]))
    made = k.kernel.enqueue_many(
        [EnqueueRequest("proj.add", args=[0], key="m0")], nested=[(1, inner)]
    )
    assert len(made) == 1
    _succeed(k, "i0", 10)
    _succeed(k, "ib", [10])
    assert _completed(k) == ["inner"]


def test_a_running_member_adds_a_chord_to_its_chord(k: Harness) -> None:
    """Celery's ``self.add_to_chord(group(...) | tsum.s())`` inside a member."""
    [made] = k.kernel.enqueue_many(
        [EnqueueRequest("proj.add", key="m0")], chord={"id": "outer", "body": _step("body")}
    )
    claim = k.kernel.claim(made.occurrence_id, owner="w1", lease=30)
    assert claim is not None
    added = _chord("added", [_step("a0", 5), _step("a1", 6)], _step("sum"))
    k.kernel.add_to_chord(
        made.occurrence_id, owner="w1", fence=claim.fence, requests=[], nested=[(0, added)]
    )
    k.kernel.succeed(made.occurrence_id, owner="w1", fence=claim.fence, result=0)
    assert not _made(k, "body")
    _succeed(k, "a0", 5)
    _succeed(k, "a1", 6)
    _succeed(k, "sum", 11)
    assert _keyed(k, "body").payload["args"] == [[0, 11]]


def test_nested_chords_are_checked_naming_them(k: Harness) -> None:
    with pytest.raises(InvalidArgument) as refused:
        k.kernel.enqueue_many([], nested=[(0, _step("plain"))])
    assert refused.value.field == "nested"
    with pytest.raises(InvalidArgument) as refused:
        k.kernel.enqueue_many([], nested=[(3, _chord("c", [_step("x")], _step("y")))])
    assert refused.value.field == "nested"
    bad = _chord("c", [{"args": []}], _step("y"))
    with pytest.raises(InvalidArgument) as refused:
        k.kernel.enqueue_many([], nested=[(0, bad)])
    assert refused.value.field == "nested[0].chord.header[0].task"
    assert k.kernel.list_occurrences(limit=10) == []
