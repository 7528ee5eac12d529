"""A run replaced (Celery's ``self.replace(sig)``, issue 40): its settle is the one
transaction that ends it without a result and makes its replacement (a task, a chain, a
chord), whose step with the run's task id takes over that id, the run's callbacks and
errbacks and its place in a chord. A lost fence makes nothing. On SQLite and PostgreSQL."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from kernel import EnqueueRequest, InvalidArgument, LeaseLost, caller_key, replacement_of
from kernel.states import OccurrenceStatus as S

if TYPE_CHECKING:
    from kernel.types import Occurrence
    from tests.kernel.conftest import Harness


def sig(task: str, *args: Any, task_id: str | None = None, **more: Any) -> dict[str, Any]:
    options = {"task_id": task_id} if task_id else {}
    return {"task": task, "args": list(args), "options": options, **more}


def _all(k: Harness) -> list[Occurrence]:
    return k.kernel.list_occurrences(limit=200)


def _task_id(k: Harness, task_id: str) -> list[Occurrence]:
    """The runs answering Celery's task id ``task_id``, oldest first."""
    return sorted((o for o in _all(k) if caller_key(o.trigger_key) == task_id), key=lambda o: o.id)


def _parent(k: Harness, occurrence_id: int) -> int:
    [created] = [e for e in k.kernel.events(occurrence_id=occurrence_id)
                 if e.type == "occurrence_created"]  # fmt: skip
    return int(created.data["parent_id"])


def _run(k: Harness, occurrence_id: int, owner: str = "w1") -> int:
    claim = k.kernel.claim(occurrence_id, owner=owner, lease=30)
    assert claim is not None
    return claim.fence


def _succeed(k: Harness, occurrence_id: int, result: Any) -> None:
    k.kernel.succeed(occurrence_id, owner="w1", fence=_run(k, occurrence_id), result=result)


def test_a_run_replaced_by_a_task_hands_it_its_task_id_and_links(k: Harness) -> None:
    made = k.kernel.enqueue(
        task="proj.add_replaced",
        args=[1, 2],
        key="t1",
        callbacks=[sig("proj.mul", 10, task_id="mul-1")],
        errbacks=[sig("proj.oops", task_id="oops-1")],
    )
    fence = _run(k, made.occurrence_id)
    [replacement] = k.kernel.replace(
        made.occurrence_id,
        owner="w1",
        fence=fence,
        replacement=sig("proj.add", 1, 2, task_id="t1"),
        task_id="t1",
    )
    replaced = k.kernel.get_occurrence(made.occurrence_id)
    assert replaced.status == S.SUCCEEDED and replaced.result is None
    new = k.kernel.get_occurrence(replacement)
    # Its parent the run it replaces, whose id it takes over (as Celery's replace calls it).
    assert new.payload == {
        "task": "proj.add", "args": [1, 2], "kwargs": {}, "request": {"parent_id": "t1"},
    }  # fmt: skip
    assert _parent(k, new.id) == made.occurrence_id
    # The caller's task id answers the replacement's result; nesting 1.
    assert caller_key(new.trigger_key) == "t1"
    assert replacement_of(new.trigger_key) == (made.occurrence_id, 1)
    [event] = [e for e in k.kernel.events(occurrence_id=made.occurrence_id)
               if e.type == "occurrence_replaced"]  # fmt: skip
    assert event.data == {"replaced_by": [replacement], "task_id": "t1"}
    # The replaced run's callback waits for the replacement's result, not for its own.
    assert [o for o in _all(k) if "mul-1" in o.trigger_key] == []
    _succeed(k, replacement, 3)
    [mul] = _task_id(k, "mul-1")
    assert mul.payload["args"] == [3, 10] and _parent(k, mul.id) == replacement
    assert len(_all(k)) == 3
    story = k.kernel.canvas(made.occurrence_id)
    assert story is not None and story["replaced_by"] == [replacement]
    assert story["waits_for"] == f"nothing: replaced by occurrence {replacement}"


def test_a_replacement_that_replaces_itself_nests(k: Harness) -> None:
    made = k.kernel.enqueue(
        task="proj.nest", args=[2], key="n1", callbacks=[sig("proj.done", task_id="done-1")]
    )
    current = made.occurrence_id
    for nesting, left in enumerate((1, 0), start=1):
        fence = _run(k, current)
        [current] = k.kernel.replace(
            current, owner="w1", fence=fence,
            replacement=sig("proj.nest", left, task_id="n1"), task_id="n1",
        )  # fmt: skip
        assert replacement_of(k.kernel.get_occurrence(current).trigger_key)[1] == nesting
    assert [o.payload["args"] for o in _task_id(k, "n1")] == [[2], [1], [0]]
    _succeed(k, current, "end")
    [done] = _task_id(k, "done-1")
    assert done.payload["args"] == ["end"]


def test_a_chain_replacement_ends_with_the_step_taking_the_task_id(k: Harness) -> None:
    rest = sig("proj.next", task_id="next-1")
    made = k.kernel.enqueue(
        task="proj.step", key="s1", callbacks=[rest], errbacks=[sig("proj.eb", task_id="eb-1")]
    )
    chain = sig("proj.a", 1, task_id="a-1", callbacks=[sig("proj.b", task_id="s1")])
    fence = _run(k, made.occurrence_id)
    [first] = k.kernel.replace(
        made.occurrence_id, owner="w1", fence=fence, replacement=chain, task_id="s1"
    )
    a = k.kernel.get_occurrence(first)
    assert a.payload["args"] == [1] and caller_key(a.trigger_key) == "a-1"
    _succeed(k, first, 5)
    [_, b] = _task_id(k, "s1")
    assert b.payload["args"] == [5]
    assert replacement_of(b.trigger_key) == (made.occurrence_id, 1)
    _succeed(k, b.id, 6)
    [nxt] = _task_id(k, "next-1")
    assert nxt.payload["args"] == [6]


def test_a_chain_replacement_s_first_step_failing_calls_the_replaced_run_s_errback(
    k: Harness,
) -> None:
    made = k.kernel.enqueue(task="proj.step", key="s1", errbacks=[sig("proj.eb", task_id="eb-1")])
    chain = sig("proj.a", task_id="a-1", settings={"max_attempts": 1},
                callbacks=[sig("proj.b", task_id="s1")])  # fmt: skip
    fence = _run(k, made.occurrence_id)
    [first] = k.kernel.replace(
        made.occurrence_id, owner="w1", fence=fence, replacement=chain, task_id="s1"
    )
    fence = _run(k, first)
    assert k.kernel.fail(first, owner="w1", fence=fence, code="E", message="x") == "dead_letter"
    [errback] = _task_id(k, "eb-1")
    assert errback.payload["args"] == ["a-1"]


def test_a_chord_member_replaced_counts_its_replacement_s_result(k: Harness) -> None:
    members = [EnqueueRequest("proj.add", args=[i], key=f"g1-m{i}") for i in range(2)]
    body = sig("proj.tsum", task_id="body-1")
    made = k.kernel.enqueue_many(members, chord={"id": "g1", "body": body})
    fence = _run(k, made[0].occurrence_id)
    [taking] = k.kernel.replace(
        made[0].occurrence_id, owner="w1", fence=fence,
        replacement=sig("proj.a", task_id="a-1", callbacks=[sig("proj.b", task_id="g1-m0")]),
        task_id="g1-m0",
    )  # fmt: skip
    _succeed(k, made[1].occurrence_id, "one")
    assert _task_id(k, "body-1") == []
    _succeed(k, taking, "first")
    assert _task_id(k, "body-1") == []  # a step of the replacement, not the member's
    [_, member] = _task_id(k, "g1-m0")
    _succeed(k, member.id, "zero")
    [made_body] = _task_id(k, "body-1")
    assert made_body.payload["args"] == [["zero", "one"]]


def test_a_chord_as_replacement_makes_its_members_and_its_body_takes_the_id(
    k: Harness,
) -> None:
    made = k.kernel.enqueue(task="proj.fan", key="f1", callbacks=[sig("proj.after", task_id="x")])
    header = [sig("proj.add", i) for i in range(2)]
    chord = {**sig("proj.tsum", task_id="f1"), "chord": {"id": "inner", "header": header}}
    fence = _run(k, made.occurrence_id)
    replaced_by = k.kernel.replace(
        made.occurrence_id, owner="w1", fence=fence, replacement=chord, task_id="f1"
    )
    assert [k.kernel.get_occurrence(i).payload["args"] for i in replaced_by] == [[0], [1]]
    for index, occurrence_id in enumerate(replaced_by):
        _succeed(k, occurrence_id, index * 10)
    [_, tsum] = _task_id(k, "f1")
    assert tsum.payload["args"] == [[0, 10]]
    _succeed(k, tsum.id, 10)
    assert _task_id(k, "x")[0].payload["args"] == [10]


def test_a_lost_fence_makes_nothing_and_the_next_holder_s_replace_makes_it_once(k: Harness) -> None:
    made = k.kernel.enqueue(task="proj.slow", key="l1", settings={"max_attempts": 3})
    stale = _run(k, made.occurrence_id)
    k.clock.advance(60)
    _run(k, made.occurrence_id, owner="w2")
    with pytest.raises(LeaseLost):
        k.kernel.replace(
            made.occurrence_id, owner="w1", fence=stale,
            replacement=sig("proj.add", task_id="l1"), task_id="l1",
        )  # fmt: skip
    assert len(_all(k)) == 1
    assert k.kernel.get_occurrence(made.occurrence_id).status == S.RUNNING
    assert not [e for e in k.kernel.events() if e.type == "occurrence_replaced"]
    # The run again after its worker died: its holder's settle makes the replacement, once.
    fence = k.kernel.get_occurrence(made.occurrence_id).fence
    k.kernel.replace(
        made.occurrence_id, owner="w2", fence=fence,
        replacement=sig("proj.add", task_id="l1"), task_id="l1",
    )  # fmt: skip
    with pytest.raises(LeaseLost):
        k.kernel.replace(
            made.occurrence_id, owner="w2", fence=fence,
            replacement=sig("proj.add", task_id="l1"), task_id="l1",
        )  # fmt: skip
    assert len(_task_id(k, "l1")) == 2


def test_a_replacement_without_the_run_s_task_id_is_refused(k: Harness) -> None:
    made = k.kernel.enqueue(task="proj.x", key="r1")
    fence = _run(k, made.occurrence_id)
    with pytest.raises(InvalidArgument) as refused:
        k.kernel.replace(
            made.occurrence_id, owner="w1", fence=fence,
            replacement=sig("proj.add", task_id="other"), task_id="r1",
        )  # fmt: skip
    assert refused.value.field == "replacement"
    assert k.kernel.get_occurrence(made.occurrence_id).status == S.RUNNING
    assert len(_all(k)) == 1


def test_a_task_id_too_long_to_take_over_is_refused_and_nothing_is_written(k: Harness) -> None:
    long_id = "x" * 200  # a caller's key may be 200 characters; its takeover's would be more
    made = k.kernel.enqueue(task="proj.x", key=long_id)
    fence = _run(k, made.occurrence_id)
    with pytest.raises(InvalidArgument) as refused:
        k.kernel.replace(
            made.occurrence_id, owner="w1", fence=fence,
            replacement=sig("proj.add", task_id=long_id), task_id=long_id,
        )  # fmt: skip
    assert refused.value.field == "key"
    assert k.kernel.get_occurrence(made.occurrence_id).status == S.RUNNING
    assert len(_all(k)) == 1
