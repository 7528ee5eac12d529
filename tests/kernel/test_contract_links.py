"""Links (issue 40): an enqueued run's callbacks (Celery's link, a chain's rest) and
errbacks (link_error) become occurrences in the transaction that settles it, once,
whoever settles it; on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from kernel import InvalidArgument
from kernel.states import OccurrenceStatus as S

if TYPE_CHECKING:
    from kernel.types import Occurrence
    from tests.kernel.conftest import Harness

ONCE = {"max_attempts": 1, "max_lost_leases": 0}


def sig(task: str, *args: Any, task_id: str | None = None, **more: Any) -> dict[str, Any]:
    options = {"task_id": task_id} if task_id else {}
    return {"task": task, "args": list(args), "options": options, **more}


def _by_key(k: Harness, task_id: str) -> Occurrence:
    [occ] = [o for o in k.kernel.list_occurrences(limit=100) if o.trigger_key == f"key:{task_id}"]
    return occ


def _run(k: Harness, occurrence_id: int, owner: str = "w1") -> int:
    claim = k.kernel.claim(occurrence_id, owner=owner, lease=30)
    assert claim is not None
    return claim.fence


def test_a_success_makes_each_callback_once_with_the_result_first(k: Harness) -> None:
    made = k.kernel.enqueue(
        task="proj.add",
        args=[1, 2],
        key="add-1",
        callbacks=[sig("proj.mul", 10, task_id="mul-1"), sig("proj.log", task_id="log-1",
                                                               immutable=True)],
        errbacks=[sig("proj.oops", task_id="oops-1")],
    )  # fmt: skip
    # The callbacks' jobs exist from the enqueue on: a settle never defines a job.
    assert k.kernel.get_job("task:proj.mul").spec["kind"] == "task"
    fence = _run(k, made.occurrence_id)
    k.kernel.succeed(made.occurrence_id, owner="w1", fence=fence, result=3)
    mul, log = _by_key(k, "mul-1"), _by_key(k, "log-1")
    assert mul.payload == {  # its parent's task id, as Celery's worker names a link's
        "task": "proj.mul", "args": [3, 10], "kwargs": {}, "request": {"parent_id": "add-1"},
    }  # fmt: skip
    assert log.payload["args"] == []  # immutable: no result prepended
    assert mul.status == S.QUEUED
    assert not [o for o in k.kernel.list_occurrences(limit=100) if "oops" in o.trigger_key]
    created = [e for e in k.kernel.events(occurrence_id=mul.id) if e.type == "occurrence_created"]
    assert len(created) == 1 and created[0].data["parent_id"] == made.occurrence_id
    assert len(k.kernel.list_occurrences(limit=100)) == 3


def test_a_chain_of_three_runs_step_by_step(k: Harness) -> None:
    third = sig("proj.c", task_id="c-1")
    second = sig("proj.b", task_id="b-1", callbacks=[third])
    first = k.kernel.enqueue(task="proj.a", args=[1], key="a-1", callbacks=[second])
    value = 1
    current = first.occurrence_id
    for task_id in ("b-1", "c-1"):
        fence = _run(k, current)
        value += 1
        k.kernel.succeed(current, owner="w1", fence=fence, result=value)
        step = _by_key(k, task_id)
        assert step.payload["args"] == [value]
        current = step.id
    fence = _run(k, current)
    k.kernel.succeed(current, owner="w1", fence=fence, result="done")
    assert k.kernel.get_occurrence(current).result == "done"
    assert len(k.kernel.list_occurrences(limit=100)) == 3


def test_a_worker_s_dead_letter_makes_each_errback_once(k: Harness) -> None:
    made = k.kernel.enqueue(
        task="proj.flaky",
        key="flaky-1",
        settings=ONCE,
        callbacks=[sig("proj.next", task_id="next-1")],
        errbacks=[sig("proj.on_error", "extra", task_id="err-1")],
    )
    fence = _run(k, made.occurrence_id)
    assert k.kernel.fail(made.occurrence_id, owner="w1", fence=fence, code="E", message="x") == (
        "dead_letter"
    )
    errback = _by_key(k, "err-1")
    # Celery's errback(task_id) as a task: the failed run's task id (its key) first.
    assert errback.payload["args"] == ["flaky-1", "extra"]
    assert not [o for o in k.kernel.list_occurrences(limit=100) if "next-1" in o.trigger_key]
    # Requeued and dead again: the errback exists already and is not made twice.
    k.kernel.requeue(made.occurrence_id, request_id="rq-1", operator="op")
    fence = _run(k, made.occurrence_id, "w2")
    k.kernel.fail(made.occurrence_id, owner="w2", fence=fence, code="E", message="x")
    assert len(k.kernel.list_occurrences(limit=100)) == 2


def test_a_lease_expiry_s_dead_letter_makes_the_errback_once(k: Harness) -> None:
    by_beat = k.kernel.enqueue(
        task="proj.killed", key="k-1", settings=ONCE, errbacks=[sig("proj.e", task_id="e-1")]
    )
    by_claim = k.kernel.enqueue(
        task="proj.killed", key="k-2", settings=ONCE, errbacks=[sig("proj.e", task_id="e-2")]
    )
    _run(k, by_beat.occurrence_id)
    _run(k, by_claim.occurrence_id)
    k.clock.advance(60)
    assert k.kernel.claim(by_claim.occurrence_id, owner="w2", lease=30) is None
    assert _by_key(k, "e-2").payload["args"] == ["k-2"]
    assert k.kernel.expire_leases()["dead_letter"] == 1
    assert _by_key(k, "e-1").payload["args"] == ["k-1"]
    assert k.kernel.expire_leases()["dead_letter"] == 0
    assert len(k.kernel.list_occurrences(limit=100)) == 4


def test_an_operator_s_abandon_makes_the_errback_and_a_cancel_none(k: Harness) -> None:
    once = {**ONCE, "delivery": "at-most-once"}
    made = k.kernel.enqueue(
        task="proj.pay", settings=once, errbacks=[sig("proj.e", task_id="e-abandon")]
    )
    _run(k, made.occurrence_id)
    k.clock.advance(60)
    assert k.kernel.expire_leases()["needs_adjudication"] == 1
    k.kernel.adjudicate(made.occurrence_id, decision="abandon", request_id="r1", operator="op")
    # No enqueue key: the failed run's task id is its occurrence id.
    assert _by_key(k, "e-abandon").payload["args"] == [str(made.occurrence_id)]
    cancelled = k.kernel.enqueue(task="proj.pay", errbacks=[sig("proj.e", task_id="e-cancel")])
    k.kernel.cancel(cancelled.occurrence_id, request_id="r2", operator="op")
    # Celery does not call link_error for a revoked task; nor does a cancel here.
    assert not [o for o in k.kernel.list_occurrences(limit=100) if "e-cancel" in o.trigger_key]


def test_an_errback_s_request_fields_reach_its_run(k: Harness) -> None:
    """How Celery calls an errback (celery_app/errbacks.py) rides on its run's request."""
    headers = {"kernel_errback": 1}
    made = k.kernel.enqueue(
        task="proj.flaky",
        key="flaky-2",
        settings=ONCE,
        errbacks=[sig("proj.on_error", "label", task_id="err-2", request={"headers": headers})],
    )
    fence = _run(k, made.occurrence_id)
    k.kernel.fail(made.occurrence_id, owner="w1", fence=fence, code="E", message="x")
    errback = _by_key(k, "err-2")
    assert errback.payload["args"] == ["flaky-2", "label"]
    assert errback.payload["request"] == {"headers": headers, "parent_id": "flaky-2"}


@pytest.mark.parametrize(
    ("link", "field"),
    [
        ({"task": ""}, "callbacks[0].task"),
        ({"task": "t", "chord": {}}, "callbacks[0].chord.id"),
        ({"task": "t", "chord": {"id": "g", "header": "t"}}, "callbacks[0].chord.header"),
        ({"task": "t", "chord": {"id": "g", "header": [{"task": "u"}], "result_id": 7}},
         "callbacks[0].chord.result_id"),
        ({"task": "t", "options": {"expires": 3}}, "callbacks[0].options.expires"),
        ({"task": "t", "options": {"priority": 999}}, "callbacks[0].priority"),
        ({"task": "t", "options": {"eta": "soon"}}, "callbacks[0].eta"),
        ({"task": "t", "options": {"eta": "2031-05-01T12:00"}}, "callbacks[0].eta"),
        ({"task": "t", "callbacks": [{"task": "u", "args": [{1}]}]},
         "callbacks[0].callbacks[0].args[0]"),
        ({"task": "t", "request": {"ignore_result": "maybe"}},
         "callbacks[0].request.ignore_result"),
    ],
)  # fmt: skip
def test_a_link_the_kernel_cannot_honour_is_refused_naming_it(
    k: Harness, link: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidArgument) as refused:
        k.kernel.enqueue(task="proj.a", callbacks=[link])
    assert refused.value.field == field
    assert k.kernel.list_occurrences(limit=10) == []


def test_a_chord_as_a_chain_step_is_made_by_the_settle_before_it(k: Harness) -> None:
    """``chain(a, chord([b, b.si(5)], total), after)``: a's settle makes the chord's
    members (a's result first unless immutable) and its row; the last member's settle
    makes the body, the rest of the chain follows the body."""
    header = [sig("proj.b", task_id="m-1"), sig("proj.b", 5, task_id="m-2", immutable=True)]
    body = sig("proj.total", task_id="body-1", callbacks=[sig("proj.after", task_id="after-1")])
    made = k.kernel.enqueue(
        task="proj.a", key="a-1", callbacks=[{**body, "chord": {"id": "g-1", "header": header}}]
    )
    assert k.kernel.get_job("task:proj.b").spec["kind"] == "task"  # defined at the enqueue
    [step] = k.kernel.canvas(made.occurrence_id)["next"]
    assert (step["chord"], step["members"], step["task"]) == ("g-1", 2, "proj.total")
    k.kernel.succeed(made.occurrence_id, owner="w1", fence=_run(k, made.occurrence_id), result=7)
    first, second = _by_key(k, "m-1"), _by_key(k, "m-2")
    assert (first.payload["args"], second.payload["args"]) == ([7], [5])
    assert k.kernel.canvas(first.id)["chord"]["remaining"] == 2
    for member, result in ((second, "y"), (first, "x")):
        assert not [o for o in k.kernel.list_occurrences(limit=100) if "body-1" in o.trigger_key]
        k.kernel.succeed(member.id, owner="w1", fence=_run(k, member.id), result=result)
    total = _by_key(k, "body-1")
    assert total.payload["args"] == [["x", "y"]]  # group order
    k.kernel.succeed(total.id, owner="w1", fence=_run(k, total.id), result="xy")
    assert _by_key(k, "after-1").payload["args"] == ["xy"]
    assert len(k.kernel.list_occurrences(limit=100)) == 5


def test_a_chord_step_with_a_chain_body_fails_under_its_result_id(k: Harness) -> None:
    """``chain(a, chord([b], chain(total, after)))``: the chord's failure is written and its
    errbacks given under ``result_id``, the chain's id (its last step's) the caller holds."""
    header = [{**sig("proj.b", task_id="m-1"), "settings": ONCE}]
    body = sig("proj.total", task_id="body-1", callbacks=[sig("proj.after", task_id="after-1")])
    body["errbacks"] = [sig("proj.on_error", task_id="eb-1")]
    chord = {"id": "g-1", "header": header, "result_id": "after-1"}
    made = k.kernel.enqueue(task="proj.a", key="a-1", callbacks=[{**body, "chord": chord}])
    k.kernel.succeed(made.occurrence_id, owner="w1", fence=_run(k, made.occurrence_id), result=7)
    member = _by_key(k, "m-1")
    k.kernel.fail(member.id, owner="w1", fence=_run(k, member.id), code="E", message="x")
    assert _by_key(k, "eb-1").payload["args"] == ["after-1"]
    failed = [e.data["body_task_id"] for e in k.kernel.events() if e.type == "chord_failed"]
    assert failed == ["after-1"]


def test_a_chord_cannot_be_an_errback(k: Harness) -> None:
    with pytest.raises(InvalidArgument) as refused:
        k.kernel.enqueue(
            task="proj.a", errbacks=[{"task": "t", "chord": {"id": "g", "header": [{"task": "u"}]}}]
        )
    assert refused.value.field == "errbacks[0].chord"


def test_a_link_whose_job_was_deleted_is_not_made_and_says_so(k: Harness) -> None:
    made = k.kernel.enqueue(task="proj.a", callbacks=[sig("proj.gone", task_id="gone-1")])
    k.kernel.delete_job("task:proj.gone", operator="op")
    fence = _run(k, made.occurrence_id)
    k.kernel.succeed(made.occurrence_id, owner="w1", fence=fence, result=1)
    assert k.kernel.get_occurrence(made.occurrence_id).status == S.SUCCEEDED
    last = k.kernel.events(occurrence_id=made.occurrence_id)[-1]
    assert (last.type, last.job_id, last.data["reason"]) == (
        "link_not_made",
        "task:proj.gone",
        "job_deleted",
    )
    assert last.data["trigger_key"] == "key:gone-1"
