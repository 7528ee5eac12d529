"""Runtime control across processes: an operator's pause/resume, and a worker's warm shutdown.

Both hand a running checkpointing job back at a safe point; it finishes from its
checkpoint under a new fence, every step done exactly once, no attempt consumed.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from integration.stack import Stack

from kernel import Occurrence

pytestmark = pytest.mark.long

STEPS = 40
STEP_S = 0.25


def steps_job(stack: Stack, hold: Path | None = None) -> dict[str, Any]:
    """The checkpointing job; with ``hold``, its last step waits while that file exists."""
    kwargs = {"total": STEPS, "step_s": STEP_S, "hold": None if hold is None else str(hold)}
    return stack.job("steps", "steps", kwargs=kwargs, lease="5s")


def assert_finished_from_checkpoint(stack: Stack, occ_id: int, handed_at: int) -> None:
    """Steps before ``handed_at`` ran under fence 1, the rest under fence 2; each exactly once."""
    done = stack.occurrence(occ_id)
    assert done.status.value == "succeeded"
    assert (done.attempt, done.fence) == (1, 2), "a resume consumes no attempt"
    assert done.result == {"done": STEPS, "resumed_from": handed_at, "fence": 2}
    steps = stack.ledger(occurrence_id=occ_id, event="step")
    assert [step["step"] for step in steps] == list(range(STEPS))
    assert [step["fence"] for step in steps] == [1] * handed_at + [2] * (STEPS - handed_at)
    assert {step["attempt"] for step in steps} == {1}


def test_operator_pauses_and_resumes_a_running_job(stack: Stack, tmp_path: Path) -> None:
    hold = tmp_path / "hold"  # the run cannot end before the pause, however slow the CLI
    hold.touch()
    stack.use_jobs(steps_job(stack, hold))
    stack.start_worker("worker")
    stack.start_beat("beat")
    occ_id = stack.run_now("steps")
    stack.wait(lambda: len(stack.ledger(occurrence_id=occ_id)) >= 2, timeout=20, what="two steps")

    asked = stack.cli("pause", str(occ_id), "--operator", "it")
    assert asked["occurrence"]["control"]["state"] == "pause_requested"

    def paused() -> Occurrence | None:
        occurrence = stack.occurrence(occ_id)
        control = occurrence.control
        return occurrence if control is not None and control.state.value == "paused" else None

    at_pause = stack.wait(paused, timeout=15, what="the pause acknowledged")
    handed_at = at_pause.checkpoint["done"]
    assert at_pause.status.value == "retry_wait"
    assert 2 <= handed_at < STEPS
    assert len(stack.ledger(occurrence_id=occ_id)) == handed_at
    time.sleep(3 * STEP_S + 1.5)  # Beat ticks and re-hints meanwhile; a paused job must not run
    assert len(stack.ledger(occurrence_id=occ_id)) == handed_at
    assert stack.occurrence(occ_id).status.value == "retry_wait"

    resumed = stack.cli("resume", str(occ_id), "--operator", "it")
    assert resumed["occurrence"]["control"]["state"] == "resumed"
    hold.unlink()
    stack.wait(lambda: stack.settled("steps"), timeout=30, what="the resumed run to finish")
    assert_finished_from_checkpoint(stack, occ_id, handed_at)
    events = [t for t, _ in stack.event_types(occ_id)]
    assert events.count("occurrence_paused") == 1 and events.count("occurrence_resumed") == 1


def test_warm_shutdown_hands_back_at_the_next_safe_point(stack: Stack) -> None:
    stack.use_jobs(steps_job(stack))
    leaving = stack.start_worker("leaving")
    stack.start_beat("beat")
    occ_id = stack.run_now("steps")
    stack.wait(lambda: len(stack.ledger(occurrence_id=occ_id)) >= 2, timeout=20, what="two steps")
    staying = stack.start_worker("staying")

    leaving.expected_exit = True
    os.kill(leaving.pid, signal.SIGTERM)  # the main process only: Celery's warm shutdown
    stack.wait(lambda: stack.settled("steps"), timeout=40, what="the run finished elsewhere")
    assert leaving.popen.wait(timeout=20) == 0, "the warm shutdown did not end cleanly"

    events = stack.event_types(occ_id)
    assert ("occurrence_handed_back", 1) in events
    steps = stack.ledger(occurrence_id=occ_id, event="step")
    handed_at = next(i for i, step in enumerate(steps) if step["fence"] == 2)
    assert 2 <= handed_at < STEPS
    assert all(staying.owns(step["pid"]) for step in steps[handed_at:])
    assert_finished_from_checkpoint(stack, occ_id, handed_at)
