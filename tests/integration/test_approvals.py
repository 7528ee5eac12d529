"""Approval gates with real processes: a running Beat applies the timeout's auto action,
and an occurrence an operator approves on the command line is run by a real worker."""

from __future__ import annotations

from integration.stack import Stack


def test_beat_applies_approval_timeouts_and_a_worker_runs_what_is_approved(stack: Stack) -> None:
    soon = {"in": "1s"}
    stack.use_jobs(
        stack.job(
            "auto-yes", "record", schedule=soon, approval={"timeout": "2s", "auto": "approve"}
        ),
        stack.job("auto-no", "record", schedule=soon, approval={"timeout": "2s"}),
        stack.job("by-hand", "record", schedule=soon, approval={"timeout": "1h"}),
    )
    stack.start_worker("worker")
    stack.start_beat("beat")

    (waiting,) = stack.wait(
        lambda: (
            [o for o in stack.occurrences("by-hand") if o.status.value == "awaiting_approval"]
            or None
        ),
        timeout=30,
        what="by-hand awaiting approval",
    )
    stack.wait(lambda: stack.ledger(job_id="auto-yes"), timeout=30, what="auto-yes ran")
    (rejected,) = stack.wait(
        lambda: [o for o in stack.occurrences("auto-no") if o.status.value == "skipped"] or None,
        timeout=30,
        what="auto-no rejected by its timeout",
    )
    assert rejected.skip_reason == "approval_timeout"
    assert stack.ledger(job_id="auto-no") == [] and stack.ledger(job_id="by-hand") == []
    (auto_yes,) = stack.occurrences("auto-yes")
    assert [t for t, _ in stack.event_types(auto_yes.id)][:3] == [
        "occurrence_created",
        "occurrence_approved",
        "occurrence_claimed",
    ]

    approved = stack.cli("approve", str(waiting.id), "--operator", "ops", "--reason", "go")
    assert approved["occurrence"]["status"] == "queued"
    stack.wait(lambda: stack.ledger(job_id="by-hand"), timeout=30, what="by-hand ran")
    stack.wait(
        lambda: stack.occurrence(waiting.id).status.value == "succeeded" or None,
        timeout=30,
        what="by-hand succeeded",
    )
    assert "approval timeouts applied" in stack.procs[1].log()
