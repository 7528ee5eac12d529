"""Workers that die or freeze mid-run: the kernel reclaims at-least-once work; a frozen run ends.

Leases are 5 s (the shortest a job may have) and jobs sleep past them, so each
test waits out one lease; the stack re-hints every second, so the reclaim
follows the expiry within about one Beat tick and one hint.
"""

from __future__ import annotations

import signal
from functools import partial
from typing import Any

import pytest
from integration.stack import Stack, ended

pytestmark = pytest.mark.long


def status(stack: Stack, occurrence_id: int) -> str:
    return stack.occurrence(occurrence_id).status.value


@pytest.mark.parametrize("stack", ["embedded", "rabbitmq"], indirect=True)
def test_killed_worker_is_reclaimed_with_a_higher_fence(stack: Stack) -> None:
    stack.use_jobs(stack.job("slow", "record", kwargs={"sleep": 8}, lease="5s", max_attempts=3))
    doomed = stack.start_worker("doomed")
    stack.start_beat("beat")
    occ_id = stack.run_now("slow")
    first = stack.wait(lambda: stack.ledger(occurrence_id=occ_id), timeout=20, what="the first run")
    assert doomed.owns(first[0]["pid"]), "the run is not in the worker about to be killed"
    survivor = stack.start_worker("survivor")

    assert len(doomed.crash()) >= 2, "the pool child was not killed with its parent"
    stack.wait(lambda: status(stack, occ_id) == "succeeded", timeout=30, what="the reclaimed run")

    runs = stack.ledger(occurrence_id=occ_id)
    assert [run["fence"] for run in runs] == [1, 2], "at-least-once: both fences ran"
    assert survivor.owns(runs[1]["pid"])
    done = stack.occurrence(occ_id)
    assert (done.fence, done.attempt, done.result["fence"]) == (2, 1, 2)
    events = stack.event_types(occ_id)
    assert [e for e in events if e[0] in ("occurrence_claimed", "occurrence_succeeded")] == [
        ("occurrence_claimed", 1),
        ("occurrence_claimed", 2),
        ("occurrence_succeeded", 2),
    ]


def test_a_killed_run_resumes_from_its_last_renewed_checkpoint(stack: Stack) -> None:
    """Checkpoints are progress: the lease keeper's renewals carry the newest one, so a run
    whose worker is SIGKILLed is taken up by another worker from there, not from zero."""
    total = 60
    steps = {"total": total, "step_s": 0.25}
    stack.use_jobs(stack.job("steps", "steps", kwargs=steps, lease="5s", max_attempts=3))
    doomed = stack.start_worker("doomed")
    stack.start_beat("beat")
    occ_id = stack.run_now("steps")

    def progress() -> dict[str, Any] | None:
        shown = stack.cli("occurrences", "show", str(occ_id))
        done = (shown["checkpoint"] or {}).get("done", 0)
        return shown if shown["status"] == "running" and done >= 3 else None

    shown = stack.wait(progress, timeout=30, what="progress shown while the run runs")
    assert shown["fence"] == 1
    assert len(doomed.crash()) >= 2, "the pool child was not killed with its parent"
    renewed = stack.occurrence(occ_id).checkpoint["done"]  # the last renewal before the kill
    assert 3 <= renewed < total
    survivor = stack.start_worker("survivor")
    stack.wait(lambda: status(stack, occ_id) == "succeeded", timeout=60, what="the reclaimed run")

    done = stack.occurrence(occ_id)
    assert done.fence == 2 and done.result == {"done": total, "resumed_from": renewed, "fence": 2}
    ran = stack.ledger(occurrence_id=occ_id, event="step")
    second = [step for step in ran if step["fence"] == 2]
    assert [step["step"] for step in second] == list(range(renewed, total))
    assert all(survivor.owns(step["pid"]) for step in second)
    # The first run got at least as far as its last renewed checkpoint, maybe a little past.
    assert [step["step"] for step in ran if step["fence"] == 1][:renewed] == list(range(renewed))


@pytest.mark.parametrize("stack", ["redis", "rabbitmq"], indirect=True)
def test_frozen_worker_is_ended_before_its_lease_expires_and_never_settles(stack: Stack) -> None:
    # A network broker, not the filesystem one: a process frozen while it holds a queue
    # file's lock would stall every other consumer of that folder.
    sleepy = {"sleep": 5}
    stack.use_jobs(
        stack.job("once", "record", kwargs=sleepy, lease="5s", delivery="at-most-once"),
        stack.job("again", "record", kwargs=sleepy, lease="5s", delivery="at-least-once"),
    )
    frozen = stack.start_worker("frozen", concurrency=2)
    stack.start_beat("beat")
    once, again = stack.run_now("once"), stack.run_now("again")
    stack.wait(lambda: len(stack.ledger(event="run")) == 2, timeout=20, what="both runs")
    runs = stack.ledger(event="run")
    assert all(frozen.owns(run["pid"]) for run in runs)

    assert len(frozen.signal_tree(signal.SIGSTOP)) >= 3, "the pool children were not frozen"
    thawed = stack.start_worker("thawed", concurrency=2)
    stack.wait(lambda: status(stack, once) == "needs_adjudication", timeout=20, what="adjudication")
    stack.wait(lambda: stack.ledger(occurrence_id=again, fence=2), timeout=20, what="the reclaim")
    # Each run's pool process was ended by its kill timer during the freeze, before the
    # lease could expire: nothing of a stale run is left to act or settle when it thaws.
    assert [run["pid"] for run in runs if not ended(run["pid"])] == []
    frozen.signal_tree(signal.SIGCONT)
    stack.wait(lambda: status(stack, again) == "succeeded", timeout=20, what="the new owner's run")
    for run in runs:
        killed = f"pid:{run['pid']} exited with 'signal 9 (SIGKILL)'"
        stack.wait(partial(frozen.logged, killed), timeout=20, what=f"Celery's report: {killed}")

    # at-most-once: one effect, no settle, an operator decides.
    assert [run["fence"] for run in stack.ledger(occurrence_id=once)] == [1]
    left = stack.occurrence(once)
    assert left.last_error is not None and left.last_error["code"] == "LEASE_EXPIRED"
    assert not [e for e in stack.event_types(once) if e[0] == "occurrence_succeeded"]
    # at-least-once: re-run under fence 2; only the new owner's settle is recorded.
    again_runs = stack.ledger(occurrence_id=again)
    assert [run["fence"] for run in again_runs] == [1, 2]
    assert thawed.owns(again_runs[1]["pid"])
    assert [e for e in stack.event_types(again) if e[0] == "occurrence_succeeded"] == [
        ("occurrence_succeeded", 2)
    ]
    assert stack.occurrence(again).result == {
        "trigger_key": again_runs[0]["trigger_key"],
        "fence": 2,
    }
