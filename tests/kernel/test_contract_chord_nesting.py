"""A chord's member that is a canvas (issue 40): a chain (its next steps ``continues`` it),
or a chain that ends in a chord. Each step hands the member's place in the chord to the
next (MEMBER_HANDED_OVER), the body of a chord it ends with takes it last, and only that
end counts the chord down: the body is made once, with the member's end result in its
place; a step or an inner chord that fails for good fails the chord. On SQLite and
PostgreSQL."""

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


def _keyed(k: Harness, task_id: str) -> Occurrence:
    [found] = k.keyed(task_id)
    return found


def _chain_chord(**settings: Any) -> list[EnqueueRequest]:
    """A plain member, and a chain of three steps (each next one ``continues``)."""
    last = _step("m1-s3", 100, continues=True)
    second = _step("m1-s2", 10, continues=True, callbacks=[last])
    return [
        EnqueueRequest("proj.add", args=[0], key="m0", settings=settings),
        EnqueueRequest("proj.add", args=[1], key="m1-s1", settings=settings, callbacks=[second]),
    ]


def test_a_member_that_is_a_chain_counts_the_chord_down_at_its_end(k: Harness) -> None:
    made = k.kernel.enqueue_many(_chain_chord(), chord={"id": "g1", "body": _step("body-1", "x")})
    k.succeed(made[1].occurrence_id, 1)
    second = _keyed(k, "m1-s2")
    assert second.payload["args"] == [1, 10]
    k.succeed(made[0].occurrence_id, 0)
    assert not k.keyed("body-1")  # the chain's first step counted nothing
    k.succeed(second.id, 11)
    assert not k.keyed("body-1")
    k.succeed(_keyed(k, "m1-s3").id, 111)
    # The member's result is its chain's end.
    assert _keyed(k, "body-1").payload["args"] == [[0, 111], "x"]
    completed = [e for e in k.kernel.events() if e.type == "chord_completed"]
    assert len(completed) == 1


def test_a_chain_member_s_step_failing_fails_the_chord_once(k: Harness) -> None:
    errback = {"task": "proj.on_error", "options": {"task_id": "eb-1"}}
    body = _step("body-1", errbacks=[errback])
    made = k.kernel.enqueue_many(_chain_chord(**ONCE), chord={"id": "g1", "body": body})
    k.succeed(made[1].occurrence_id, 1)
    k.fail(_keyed(k, "m1-s2").id, retryable=False)
    assert _keyed(k, "eb-1").payload["args"] == ["body-1"]
    k.succeed(made[0].occurrence_id, 0)
    assert not k.keyed("body-1") and not k.keyed("m1-s3")
    failed = [e.data for e in k.kernel.events() if e.type == "chord_failed"]
    assert [(f["chord_id"], f["member_task_id"]) for f in failed] == [("g1", "m1-s2")]


def _chain_ending_in_a_chord(k: Harness) -> None:
    """Celery's ``chain(a, chord([b, chain(c, chord([d, e], f))], g))``, its ``a`` succeeded
    (the outer chord's members made)."""
    inner = _step(
        "f", 6, continues=True, chord={"id": "inner", "header": [_step("d", 4), _step("e", 5)]}
    )
    header = [_step("b", 2), _step("c", 3, callbacks=[inner])]
    outer = _step("g", 7, chord={"id": "outer", "header": header})
    first = k.kernel.enqueue(task="proj.add", args=[1], key="a", callbacks=[outer])
    k.succeed(first.occurrence_id, 1)


def test_a_member_chain_ending_in_a_chord_is_counted_by_that_chord_s_body(k: Harness) -> None:
    _chain_ending_in_a_chord(k)
    k.succeed(_keyed(k, "c").id, 3)
    k.succeed(_keyed(k, "b").id, 2)
    k.succeed(_keyed(k, "d").id, 4)
    assert not k.keyed("f")
    k.succeed(_keyed(k, "e").id, 5)
    assert _keyed(k, "f").payload["args"] == [[4, 5], 6]
    assert not k.keyed("g")
    k.succeed(_keyed(k, "f").id, 66)
    assert _keyed(k, "g").payload["args"] == [[2, 66], 7]
    completed = [e.data["chord_id"] for e in k.kernel.events() if e.type == "chord_completed"]
    assert completed == ["inner", "outer"]


def test_the_chord_a_member_s_chain_ends_with_failing_fails_the_outer_chord(k: Harness) -> None:
    _chain_ending_in_a_chord(k)
    k.succeed(_keyed(k, "b").id, 2)
    k.succeed(_keyed(k, "c").id, 3)
    k.fail(_keyed(k, "d").id, retryable=False)
    k.succeed(_keyed(k, "e").id, 5)
    assert not k.keyed("f") and not k.keyed("g")
    failed = [
        (e.data["chord_id"], e.data["body_task_id"])
        for e in k.kernel.events()
        if e.type == "chord_failed"
    ]
    assert failed == [("inner", "f"), ("outer", "g")]


def test_a_long_chain_s_rest_is_flat_each_step_made_in_turn(k: Harness) -> None:
    """A chain's steps after the next one are its flat ``rest``: a chain of 80 steps nests
    no deeper than one of two, each step made by the one before, given its result."""
    steps = [_step(f"s{i}", i) for i in range(1, 80)]
    first = k.kernel.enqueue(
        task="proj.add",
        args=[0],
        key="s0",
        callbacks=[{**steps[0], "continues": True, "rest": steps[1:]}],
    )
    k.succeed(first.occurrence_id, 0)
    for i in range(1, 80):
        step = _keyed(k, f"s{i}")
        assert step.payload["args"] == [i - 1, i]
        k.succeed(step.id, i)
    story = k.kernel.canvas(first.occurrence_id)
    assert (story["step"], story["steps"]) == (1, 80)
    # The steps after it, whose results a failure of it is written under (the worker).
    assert story["continued_by"] == [f"s{i}" for i in range(1, 80)]


def test_a_chain_too_long_for_its_links_is_refused_naming_them(k: Harness) -> None:
    steps = [_step(f"s{i}", "x" * 200) for i in range(400)]
    with pytest.raises(InvalidArgument) as refused:
        k.kernel.enqueue(task="proj.add", key="s0", callbacks=[{**steps[0], "rest": steps[1:]}])
    assert refused.value.field == "links"
    assert k.kernel.list_occurrences(limit=10) == []


def test_a_chord_member_s_chain_as_a_flat_rest_counts_at_its_end(k: Harness) -> None:
    rest = [_step("m1-s2", 10), _step("m1-s3", 100)]
    members = [
        EnqueueRequest("proj.add", args=[0], key="m0"),
        EnqueueRequest(
            "proj.add",
            args=[1],
            key="m1-s1",
            callbacks=[{**rest[0], "continues": True, "rest": rest[1:]}],
        ),
    ]
    made = k.kernel.enqueue_many(members, chord={"id": "g1", "body": _step("body-1")})
    k.succeed(made[0].occurrence_id, 0)
    k.succeed(made[1].occurrence_id, 1)
    k.succeed(_keyed(k, "m1-s2").id, 11)
    assert not k.keyed("body-1")
    k.succeed(_keyed(k, "m1-s3").id, 111)
    assert _keyed(k, "body-1").payload["args"] == [[0, 111]]


def test_a_chord_s_body_may_be_a_group_each_member_made_once(k: Harness) -> None:
    """Celery's ``chord(header, group(b, c))``: the body is a list of signatures, each
    made by the last member's settle, the members' results first; once."""
    members = [EnqueueRequest("proj.add", args=[i], key=f"m{i}") for i in range(2)]
    body = [_step("b0", "x"), _step("b1", "y")]
    made = k.kernel.enqueue_many(members, chord={"id": "g1", "body": body})
    k.succeed(made[1].occurrence_id, 1)
    assert not k.keyed("b0") and not k.keyed("b1")
    k.succeed(made[0].occurrence_id, 0)
    assert [_keyed(k, b).payload["args"] for b in ("b0", "b1")] == [[[0, 1], "x"], [[0, 1], "y"]]
    # A member failing fails each of the group's members' results (the worker writes them).
    once = [EnqueueRequest("proj.add", key=f"f{i}", settings=ONCE) for i in range(2)]
    failing = k.kernel.enqueue_many(once, chord={"id": "g3", "body": [_step("c0"), _step("c1")]})
    k.fail(failing[0].occurrence_id, retryable=False)
    [failed] = [e.data for e in k.kernel.events() if e.type == "chord_failed"]
    assert failed["body_task_ids"] == ["c0", "c1"]
    with pytest.raises(InvalidArgument) as refused:
        k.kernel.enqueue_many(members, chord={"id": "g2", "body": [_step("b2"), {"args": []}]})
    assert refused.value.field == "chord.body[1].task"
