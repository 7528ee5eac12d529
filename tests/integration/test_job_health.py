"""Job health with real workers: the deployment's default timeout and failure notifications."""

from __future__ import annotations

from integration.stack import Stack


def test_a_job_without_a_timeout_is_stopped_by_kernel_default_timeout(stack: Stack) -> None:
    stack.env["KERNEL_DEFAULT_TIMEOUT"] = "1s"
    stack.start_worker("worker")
    # 100 steps of 0.2 s with a checkpoint after each: only the default timeout ends it.
    stack.define(
        stack.job("endless", "steps", kwargs={"total": 100, "step_s": 0.2}, max_attempts=1),
        stack.job("bounded", "steps", kwargs={"total": 8, "step_s": 0.2}, timeout="5s"),
    )
    endless, bounded = stack.run_now("endless"), stack.run_now("bounded")
    stack.send_hints(endless)
    stack.send_hints(bounded)

    settled = lambda: stack.settled("endless") and stack.settled("bounded")  # noqa: E731
    stack.wait(settled, timeout=30, what="both runs to settle")
    timed_out = stack.occurrence(endless)
    assert timed_out.status.value == "dead_letter"
    assert timed_out.last_error is not None
    assert timed_out.last_error["code"] == "TIMEOUT"
    assert "timed out after 1s (kernel_default_timeout)" in timed_out.last_error["message"]
    assert len(stack.ledger(occurrence_id=endless)) < 10
    # A job's own timeout wins over the default: 1.6 s of steps outlive the default's 1 s.
    assert stack.occurrence(bounded).status.value == "succeeded"
