"""``Kernel.worker_lane``, the Celery runtime's claim and success: the same refusals of what
comes from outside as ``Kernel.claim`` / ``Kernel.succeed``, the same settle, and the runs
a settle makes handed to ``on_runs_made`` (SQLite and PostgreSQL)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from kernel import DispatchHint, InvalidArgument, KernelError, LeaseLost

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness

_BAD_IDS = [object(), True, "1", 1.0, None, 2**63, -(2**63) - 1]
_BAD_OWNERS = ["w\x00", 3, None, b"w"]


def _named(value: Any) -> str:
    return type(value).__name__ if type(value) is object else repr(value)


def _refusal(call: Any, *args: Any, **kwargs: Any) -> tuple[type, str, str | None, str]:
    with pytest.raises(KernelError) as refused:
        call(*args, **kwargs)
    error = refused.value
    return type(error), error.code, getattr(error, "field", None), str(error)


def _claimed(k: Harness) -> tuple[int, int]:
    occurrence_id = k.kernel.enqueue(task="proj.a", key="a-1").occurrence_id
    claim = k.kernel.worker_lane.claim(occurrence_id, owner="w1")
    assert claim is not None and claim.owner == "w1"
    return occurrence_id, claim.fence


@pytest.mark.parametrize("bad", _BAD_IDS, ids=_named)
def test_a_bad_occurrence_id_is_refused_as_the_kernel_refuses_it(k: Harness, bad: Any) -> None:
    lane, kernel = k.kernel.worker_lane, k.kernel
    before = kernel.last_event_id()
    expected = _refusal(lambda: kernel.claim(bad, owner="w1"))
    assert expected[:3] == (InvalidArgument, "INVALID_ARGUMENT", "occurrence_id")
    assert _refusal(lambda: lane.claim(bad, owner="w1")) == expected
    expected = _refusal(lambda: kernel.succeed(bad, owner="w1", fence=1))
    assert _refusal(lambda: lane.succeed(bad, owner="w1", fence=1)) == expected
    assert kernel.last_event_id() == before


@pytest.mark.parametrize("bad", _BAD_OWNERS, ids=_named)
def test_a_bad_owner_or_fence_is_refused_as_the_kernel_refuses_it(k: Harness, bad: Any) -> None:
    occurrence_id, fence = _claimed(k)
    lane, kernel = k.kernel.worker_lane, k.kernel
    before = kernel.last_event_id()
    expected = _refusal(lambda: kernel.claim(occurrence_id, owner=bad))
    assert expected[2] == "owner"
    assert _refusal(lambda: lane.claim(occurrence_id, owner=bad)) == expected
    expected = _refusal(lambda: kernel.succeed(occurrence_id, owner=bad, fence=fence))
    assert _refusal(lambda: lane.succeed(occurrence_id, owner=bad, fence=fence)) == expected
    for bad_fence in (_BAD_IDS[0], True, 2**63, "1"):
        expected = _refusal(kernel.succeed, occurrence_id, owner="w1", fence=bad_fence)
        assert expected[2] == "fence"
        assert _refusal(lane.succeed, occurrence_id, owner="w1", fence=bad_fence) == expected
    # A fence or owner that is well formed but not the holder's: LeaseLost, nothing stored.
    with pytest.raises(LeaseLost):
        lane.succeed(occurrence_id, owner="w1", fence=fence + 1)
    with pytest.raises(LeaseLost):
        lane.succeed(occurrence_id, owner="w2", fence=fence)
    assert kernel.last_event_id() == before
    assert kernel.get_occurrence(occurrence_id).status == "running"


def test_a_result_is_stored_as_the_kernel_stores_it(k: Harness) -> None:
    occurrence_id, fence = _claimed(k)
    k.kernel.worker_lane.succeed(occurrence_id, owner="w1", fence=fence, result={1, 2})
    stored = k.kernel.get_occurrence(occurrence_id)
    assert stored.status == "succeeded"
    assert stored.result["unstored_result"]["type"] == "builtins.set"
    assert k.kernel.worker_lane.claim(occurrence_id, owner="w1") is None


def test_a_success_that_makes_a_chain_step_hands_it_over(k: Harness) -> None:
    published: list[list[DispatchHint]] = []
    k.kernel.on_runs_made = published.append
    try:
        sig = {"task": "proj.b", "args": [], "options": {"task_id": "b-1"}}
        made = k.kernel.enqueue(task="proj.a", key="a-1", callbacks=[sig])
        claim = k.kernel.worker_lane.claim(made.occurrence_id, owner="w1")
        assert claim is not None
        assert published == []  # a claim makes no run
        k.kernel.worker_lane.succeed(made.occurrence_id, owner="w1", fence=claim.fence, result=3)
        [b] = k.keyed("b-1")
        [[hint]] = published
        assert (hint.occurrence_id, hint.job_id) == (b.id, "task:proj.b")
        # The step runs through the lane too, and makes nothing.
        step = k.kernel.worker_lane.claim(b.id, owner="w1")
        assert step is not None
        k.kernel.worker_lane.succeed(b.id, owner="w1", fence=step.fence)
        assert len(published) == 1
    finally:
        k.kernel.on_runs_made = None
