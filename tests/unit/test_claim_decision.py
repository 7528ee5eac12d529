"""A claim's decision is pure: the row read, its control and a requeue grant in, a frozen
value out (kernel.occurrences.claiming.decide; the guarded CLAIM decides again)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kernel.occurrences.claiming import ClaimDecision, decide


def _row(**fields: Any) -> dict[str, Any]:
    return {
        "status": "queued",
        "fence": 0,
        "control_state": None,
        "cancel_requested": False,
        "lease_expired": False,
        "attempts_left": True,
        "lost_leases_left": True,
        "exclusive": False,
        "delivery": "at-least-once",
        **fields,
    }


def test_a_queued_row_with_attempts_left_is_taken_spending_one() -> None:
    assert decide(_row(), None, None) == ClaimDecision(take=True)


def test_no_attempt_left_leaves_it_unless_the_claim_is_free() -> None:
    assert decide(_row(attempts_left=False), None, None) == ClaimDecision()
    granted = decide(_row(status="retry_wait", attempts_left=False), None, "req-1")
    assert granted.take and granted.free and not granted.resuming


def test_a_resumed_control_at_the_rows_fence_resumes_as_the_same_attempt() -> None:
    control = SimpleNamespace(expected_fence=3)
    row = _row(status="retry_wait", fence=3, control_state="resumed", attempts_left=False)
    assert decide(row, control, None) == ClaimDecision(take=True, resuming=True, free=True)  # type: ignore[arg-type]
    assert decide({**row, "fence": 4}, control, None) == ClaimDecision()  # type: ignore[arg-type]


def test_an_expired_lease_that_decides_its_end_is_settled_not_taken() -> None:
    running = _row(status="running", fence=2, lease_expired=True)
    assert decide({**running, "lost_leases_left": False}, None, None) == ClaimDecision(expire=True)
    assert decide({**running, "delivery": "at-most-once"}, None, None) == ClaimDecision(expire=True)
    # A lost worker is not the task's failure: the reclaim is free, attempts left or not.
    spent = {**running, "attempts_left": False}
    assert decide(spent, None, None) == ClaimDecision(take=True, reclaiming=True, free=True)
    paused = {**spent, "control_state": "pause_requested"}
    assert decide(paused, None, None) == ClaimDecision(take=True, reclaiming=True, free=True)


def test_a_paused_or_cancel_requested_row_is_left_and_a_job_check_asked_when_exclusive() -> None:
    assert decide(_row(control_state="paused"), None, None) == ClaimDecision()
    assert decide(_row(cancel_requested=True), None, None) == ClaimDecision()
    assert decide(_row(exclusive=True), None, None).ask_job
    assert decide(_row(delivery="at-most-once"), None, None).ask_job
