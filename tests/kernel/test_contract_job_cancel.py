"""``Kernel.cancel_job``: disable, cancel waiting work, ask running work to stop, cascade."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kernel.errors import EvidenceConflict, NotFound, StateConflict
from kernel.states import OccurrenceStatus as S

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness


def test_cancel_disables_the_job_cancels_waiting_and_asks_running_to_stop(k: Harness) -> None:
    claim = k.running("job")
    [waiting] = k.fire("job").created
    done = k.kernel.cancel_job("job", request_id="r1", operator="op")
    assert (done.jobs, done.disabled) == (("job",), ("job",))
    assert (done.cancelled, done.stopping) == ((waiting,), (claim.occurrence.id,))
    assert not done.deduplicated
    assert not k.kernel.get_job("job").enabled
    assert k.kernel.get_occurrence(waiting).status == S.CANCELLED
    assert k.kernel.renew(
        claim.occurrence.id, owner="w1", fence=claim.fence, lease=30
    ).cancel_requested
    k.kernel.cancelled(claim.occurrence.id, owner="w1", fence=claim.fence)
    [event] = [e for e in k.kernel.events(job_id="job") if e.type == "job_cancelled"]
    assert event.data["request_id"] == "r1" and event.data["cancelled"] == [waiting]
    # Beat fires nothing more: the cursor CAS needs an enabled job.
    assert k.kernel.due_jobs() == []


def test_cancel_ends_occurrences_awaiting_approval_and_releases_their_budget(
    k: Harness,
) -> None:
    approval = {"required": True, "timeout": "10m", "auto": "approve"}
    k.define("job", approval=approval, budget={"window": "1h", "max_runs": 5})
    [awaiting] = k.fire("job").created
    assert k.kernel.get_occurrence(awaiting).status == S.AWAITING_APPROVAL
    done = k.kernel.cancel_job("job", request_id="r1", operator="op")
    assert done.cancelled == (awaiting,)
    assert k.kernel.get_occurrence(awaiting).status == S.CANCELLED
    assert k.event_types(awaiting)[-1] == "budget_released"
    # The timeout's auto approve finds nothing to queue for the cancelled job.
    k.clock.advance(601)
    assert k.kernel.apply_approval_timeouts() == {"approved": 0, "rejected": 0}


def test_cancel_is_idempotent_by_request_id(k: Harness) -> None:
    k.occurrences("job")
    first = k.kernel.cancel_job("job", request_id="r1", operator="op")
    again = k.kernel.cancel_job("job", request_id="r1", operator="op")
    assert again.deduplicated and again.jobs == ("job",) and again.cancelled == ()
    assert len(first.cancelled) == 1
    with pytest.raises(EvidenceConflict):
        k.kernel.cancel_job("job", cascade=True, request_id="r1", operator="op")
    # Nothing left to do: a new request still answers (the job stays disabled).
    assert k.kernel.cancel_job("job", request_id="r2", operator="op").disabled == ()


def test_cascade_recurses_into_chained_children_and_only_with_cascade(k: Harness) -> None:
    k.define("parent")
    k.define("child", after={"job": "parent"})
    k.define("grandchild", after={"job": "child"})
    k.define("unrelated")
    child_occ = k.kernel.run_now("child", request_id="c", operator="op").occurrence.id
    plain = k.kernel.cancel_job("parent", request_id="r1", operator="op")
    assert plain.jobs == ("parent",) and k.kernel.get_job("child").enabled
    deep = k.kernel.cancel_job("parent", cascade=True, request_id="r2", operator="op")
    assert deep.jobs == ("parent", "child", "grandchild")
    assert deep.disabled == ("child", "grandchild") and deep.cancelled == (child_occ,)
    assert k.kernel.get_job("unrelated").enabled
    # A disabled child is not fired by its parent's outcome.
    k.kernel.set_job_enabled("parent", True)
    claim = k.running("parent")
    k.kernel.succeed(claim.occurrence.id, owner="w1", fence=claim.fence)
    assert [o.id for o in k.kernel.list_occurrences(job_id="child")] == [child_occ]


def test_cancel_of_an_unknown_job_is_not_found_and_records_nothing(k: Harness) -> None:
    with pytest.raises(NotFound):
        k.kernel.cancel_job("nope", request_id="r1", operator="op")
    k.define("job")
    assert k.kernel.cancel_job("job", request_id="r1", operator="op").disabled == ("job",)


def test_a_cancelled_job_can_still_be_run_now_and_deleted(k: Harness) -> None:
    k.occurrences("job")
    k.kernel.cancel_job("job", request_id="r1", operator="op")
    made = k.kernel.run_now("job", request_id="r2", operator="op").occurrence
    assert made.status == S.QUEUED
    with pytest.raises(StateConflict):
        k.kernel.delete_job("job")
    k.kernel.cancel(made.id, request_id="r3", operator="op")
    k.kernel.delete_job("job")
