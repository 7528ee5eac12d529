"""A pool process Celery forked to replace one that died lives through a warm shutdown.

With the embedded broker (a transport without an event loop) billiard's pool forks the
replacement from its supervisor thread, and Celery's parent-death signal followed that
thread: the replacement was SIGKILLed a second into every warm shutdown, whatever it ran.
"""

from __future__ import annotations

import os
import signal

import pytest
from integration.stack import Stack, ended

pytestmark = pytest.mark.long


def test_a_replacement_pool_process_finishes_its_run_at_a_warm_shutdown(stack: Stack) -> None:
    stack.use_jobs(
        stack.job("victim", "record", kwargs={"sleep": 60}, lease="60s"),
        stack.job("last", "record", kwargs={"sleep": 5}),
    )
    worker = stack.start_worker("w")
    stack.start_beat("beat")
    victim = stack.run_now("victim")
    killed = stack.wait(lambda: stack.ledger(occurrence_id=victim), timeout=20, what="the victim")
    assert worker.owns(killed[0]["pid"])
    os.kill(killed[0]["pid"], signal.SIGKILL)  # busy, not waiting on the pool's task queue
    last = stack.run_now("last")
    run = stack.wait(lambda: stack.ledger(occurrence_id=last), timeout=30, what="the last run")
    assert worker.owns(run[0]["pid"]) and run[0]["pid"] != killed[0]["pid"], "not a replacement"

    worker.expected_exit = True
    os.kill(worker.pid, signal.SIGTERM)  # Celery's warm shutdown waits for the running task
    stack.wait(lambda: stack.settled("last"), timeout=20, what="the replacement's run to end")
    assert stack.occurrence(last).status.value == "succeeded"
    assert worker.popen.wait(timeout=30) == 0, "the warm shutdown did not end cleanly"
    assert "exited with 'signal 9 (SIGKILL)'" not in worker.log().split("Warm shutdown")[-1]


def test_a_replacement_pool_process_ends_with_its_killed_main_process(stack: Stack) -> None:
    stack.use_jobs(
        stack.job("victim", "record", kwargs={"sleep": 60}, lease="60s"),
        stack.job("last", "record", kwargs={"sleep": 60}, lease="60s"),
    )
    worker = stack.start_worker("w")
    stack.start_beat("beat")
    victim = stack.run_now("victim")
    killed = stack.wait(lambda: stack.ledger(occurrence_id=victim), timeout=20, what="the victim")
    os.kill(killed[0]["pid"], signal.SIGKILL)
    last = stack.run_now("last")
    run = stack.wait(lambda: stack.ledger(occurrence_id=last), timeout=30, what="the last run")
    replacement = run[0]["pid"]
    assert worker.owns(replacement) and replacement != killed[0]["pid"], "not a replacement"

    worker.expected_exit = True
    os.kill(worker.pid, signal.SIGKILL)  # as the OOM killer would: no warm shutdown
    stack.wait(lambda: ended(replacement), timeout=10, what="the replacement to end with it")
