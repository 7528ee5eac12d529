"""SPEC I7: evidence a caller did not give is not evidence; given evidence is compared."""

from __future__ import annotations

import pytest

from kernel.errors import EvidenceConflict
from tests.kernel.conftest import Harness


def _dead_letter(k: Harness) -> int:
    claim = k.running(max_attempts=1)
    k.kernel.fail(
        claim.occurrence.id,
        owner="w1",
        fence=claim.fence,
        code="BOOM",
        message="x",
        retryable=False,
    )
    return claim.occurrence.id


def test_a_requeue_replayed_after_the_worker_ran_it_is_deduplicated(k: Harness) -> None:
    occ = _dead_letter(k)
    first = k.kernel.requeue(occ, request_id="rq", operator="t")
    assert not first.deduplicated and first.occurrence.status == "retry_wait"
    claim = k.kernel.claim(occ, owner="w2", lease=30)
    assert claim is not None and claim.fence == 2
    replay = k.kernel.requeue(occ, request_id="rq", operator="t")
    assert replay.deduplicated and replay.occurrence.status == "running"


def test_a_replay_with_other_explicit_evidence_is_refused(k: Harness) -> None:
    occ = _dead_letter(k)
    k.kernel.requeue(
        occ, expected_fence=1, expected_error_code="BOOM", request_id="rq", operator="t"
    )
    assert k.kernel.requeue(occ, expected_fence=1, request_id="rq", operator="t").deduplicated
    with pytest.raises(EvidenceConflict):
        k.kernel.requeue(occ, expected_fence=2, request_id="rq", operator="t")


def test_a_pause_without_fence_pauses_the_current_run_and_replays(k: Harness) -> None:
    claim = k.running()
    occ = claim.occurrence.id
    points = ["before_execute"]
    first = k.kernel.request_pause(occ, request_id="p", safe_points=points, operator="t")
    assert first.occurrence.control is not None
    assert first.occurrence.control.state == "pause_requested"
    assert k.kernel.request_pause(
        occ, request_id="p", safe_points=points, operator="t"
    ).deduplicated
    with pytest.raises(EvidenceConflict):  # another adapter capability is other evidence
        k.kernel.request_pause(
            occ, request_id="p", safe_points=["adapter_checkpoint"], operator="t"
        )


def test_a_settle_ends_a_pending_pause_with_an_event(k: Harness) -> None:
    claim = k.running()
    occ = claim.occurrence.id
    k.kernel.request_pause(occ, request_id="p", safe_points=["before_execute"], operator="t")
    k.kernel.fail(occ, owner="w1", fence=claim.fence, code="BOOM", message="x")
    assert k.kernel.get_occurrence(occ).status == "retry_wait"
    assert k.kernel.get_occurrence(occ).control.state == "terminal"  # type: ignore[union-attr]
    assert "control_terminal" in k.event_types(occ)
