"""A pool process Celery forked to replace one that died lives through a warm shutdown.

With the embedded broker (a transport without an event loop) billiard's pool forks the
replacement from its supervisor thread, and Celery's parent-death signal followed that
thread: the replacement was SIGKILLed a second into every warm shutdown, whatever it ran.

That pool's processes share one task queue (a pipe) and one lock to read it: the idle
process holding the lock waits in the read, the others wait for the lock. One killed
there from outside (the OOM killer, an operator) left the lock taken for good: no pool
process ever got another task, and the worker's exit waited for that lock forever.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from integration.stack import Proc, Stack, ended

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


def _wchan(pid: int) -> str:
    """Where in the kernel ``pid`` sleeps (``/proc/PID/wchan``), "" once it has ended."""
    try:
        return Path(f"/proc/{pid}/wchan").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def _reading_the_task_queue(worker: Proc) -> int | None:
    """The one pool process blocked reading the pool's task queue (it holds the queue's
    lock while it waits; the others sleep on that lock), once they are all idle."""
    readers = [pid for pid in worker.children() if "pipe" in _wchan(pid)]
    return readers[0] if len(readers) == 1 else None


@pytest.mark.parametrize("concurrency", [1, 2])  # its replacement, or the other, runs next
def test_a_pool_process_killed_idle_leaves_the_pool_running_and_stoppable(
    stack: Stack, concurrency: int
) -> None:
    worker = stack.start_worker("w", concurrency=concurrency)  # it migrates the kernel
    stack.define(stack.job("after", "record"))
    holder = stack.wait(
        lambda: _reading_the_task_queue(worker),
        timeout=30,
        what="a pool process blocked reading the task queue (/proc/PID/wchan)",
    )
    os.kill(holder, signal.SIGKILL)  # idle, in its read, with the queue's lock taken
    stack.wait(lambda: ended(holder), timeout=10, what="the killed pool process to end")

    after = stack.run_now("after")
    stack.send_hints(after)
    run = stack.wait(lambda: stack.ledger(occurrence_id=after), timeout=30, what="a run after")
    assert worker.owns(run[0]["pid"]) and run[0]["pid"] != holder
    stack.wait(lambda: stack.settled("after"), timeout=30, what="the run after to settle")
    assert stack.occurrence(after).status.value == "succeeded"

    worker.expected_exit = True
    worker.terminate()
    assert not worker.reap(time.monotonic() + 40), f"the worker did not stop:\n{worker.hang}"
    assert worker.popen.returncode == 0
