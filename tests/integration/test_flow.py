"""Issue 13 across real processes: a cascade cancel stops a parent's and a child's live
runs; Beat applies retention on its own (delete_after_run, history by age)."""

from __future__ import annotations

import pytest
from integration.stack import Stack

from kernel import NotFound

STEPS = 200
STEP_S = 0.1


def test_cascade_cancel_stops_a_live_parent_and_child_and_disables_both(stack: Stack) -> None:
    steps = {"total": STEPS, "step_s": STEP_S}
    stack.use_jobs(
        stack.job("parent", "steps", kwargs=steps, lease="5s"),
        stack.job("child", "steps", kwargs=steps, lease="5s", after={"job": "parent"}),
    )
    stack.start_worker("worker", concurrency=2)
    stack.start_beat("beat")
    parent, child = stack.run_now("parent"), stack.run_now("child")
    for occ in (parent, child):
        stack.wait(
            lambda occ=occ: len(stack.ledger(occurrence_id=occ)) >= 2,
            timeout=30,
            what=f"occurrence {occ} running",
        )

    done = stack.cli("jobs", "cancel", "parent", "--cascade", "--request-id", "stop-1")
    assert (done["jobs"], done["disabled"]) == (["parent", "child"], ["parent", "child"])
    assert sorted(done["stopping"]) == sorted([parent, child]) and done["cancelled"] == []

    stack.wait(
        lambda: stack.settled("parent") and stack.settled("child"),
        timeout=30,
        what="both runs to stop",
    )
    for occ in (parent, child):
        assert stack.occurrence(occ).status.value == "cancelled"
        assert len(stack.ledger(occurrence_id=occ)) < STEPS  # stopped at a safe point
    assert not stack.kernel.get_job("parent").enabled and not stack.kernel.get_job("child").enabled
    # The parent's cancelled run does not fire the (disabled) child.
    assert [o.id for o in stack.occurrences("child")] == [child]
    again = stack.cli("jobs", "cancel", "parent", "--cascade", "--request-id", "stop-1")
    assert again["deduplicated"] is True


def test_beat_applies_retention_by_itself(stack: Stack) -> None:
    stack.env.update(
        KERNEL_RETENTION_SUCCEEDED="2s", KERNEL_RETENTION_INTERVAL="1", KERNEL_RETENTION_BATCH="1"
    )
    stack.use_jobs(
        stack.job("once", "record", schedule={"in": "1s"}, delete_after_run=True),
        stack.job("plain", "record", overlap="allow"),
    )
    stack.start_worker("worker")
    beat = stack.start_beat("beat")
    manual = [stack.run_now("plain") for _ in range(3)]
    stack.wait(lambda: stack.occurrences("once") and stack.settled("once"), timeout=30, what="once")
    [once] = stack.occurrences("once")

    def job_gone() -> bool:
        try:
            stack.kernel.get_job("once")
        except NotFound:
            return True
        return False

    stack.wait(job_gone, timeout=30, what="retention to delete the one-shot job")
    # Batches of one: every succeeded occurrence goes, one per pass, without an operator.
    stack.wait(
        lambda: not stack.kernel.list_occurrences(statuses=["succeeded"]),
        timeout=60,
        what="retention to prune succeeded history",
    )
    for occ in (once.id, *manual):
        with pytest.raises(NotFound):
            stack.occurrence(occ)
    types = [e.type for e in stack.kernel.events(limit=1000)]
    assert "job_expired" in types and types.count("history_pruned") >= 4
    assert beat.logged("retention pruned") and beat.logged("(more to do)")
