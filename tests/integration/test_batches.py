"""Hints carrying several occurrences (a deep queue's batch, issue 22), through real workers.

Each id of a batch is claimed just before it runs: one taken by another worker, paused or
cancelled before its turn is skipped; a worker killed mid-batch leaves the ids it had not
started to the pump, which hints them again after ``kernel_rehint_after`` (1 s in these
stacks), not after any lease; none runs twice.
"""

from __future__ import annotations

import time

import pytest
from integration.stack import Stack


def slow_batch(stack: Stack, sleep: float, quick: int) -> list[int]:
    """One message: a run of ``sleep`` seconds, then ``quick`` instant ones; returns when the
    first has started, with the ids in order."""
    stack.define(
        stack.job("slow", "record", kwargs={"sleep": sleep}, lease="30s"),
        stack.job("quick", "record", lease="30s"),
    )
    ids = [stack.run_now("slow"), *(stack.run_now("quick") for _ in range(quick))]
    stack.send_hints(*ids)
    stack.wait(lambda: stack.ledger(occurrence_id=ids[0]), timeout=20, what="the first run")
    return ids


def test_a_batch_skips_what_was_claimed_paused_or_cancelled_before_its_turn(stack: Stack) -> None:
    worker = stack.start_worker("worker", concurrency=1)
    first, taken, paused, cancelled, *rest = slow_batch(stack, sleep=3, quick=5)
    kernel = stack.kernel
    # While the first run sleeps: another worker takes one, an operator pauses one
    # (claimed and paused at a safe point by its holder) and cancels another.
    assert kernel.claim(taken, owner="elsewhere") is not None
    held = kernel.claim(paused, owner="pauser")
    assert held is not None
    kernel.request_pause(
        paused,
        expected_fence=held.fence,
        request_id="pause-1",
        safe_points=["before_execute"],
        operator="ops",
    )
    kernel.ack_pause(
        paused,
        owner="pauser",
        fence=held.fence,
        request_id="pause-1",
        expected_revision=None,
        safe_point="before_execute",
        checkpoint=None,
    )
    kernel.cancel(cancelled, request_id="cancel-1", operator="ops")
    stack.wait(
        lambda: all(stack.occurrence(i).status.value == "succeeded" for i in [first, *rest]),
        timeout=30,
        what="the batch's other runs",
    )

    pids = {line["pid"] for line in stack.ledger()}
    assert len(pids) == 1, pids  # one pool process ran the whole batch
    for occ_id in (first, *rest):
        assert [run["fence"] for run in stack.ledger(occurrence_id=occ_id)] == [1]
        events = [t for t, _ in stack.event_types(occ_id)]
        assert events.count("occurrence_claimed") == 1, (occ_id, events)
    for occ_id in (taken, paused, cancelled):
        assert stack.ledger(occurrence_id=occ_id) == [], occ_id
    assert stack.occurrence(taken).lease_owner == "elsewhere"
    control = stack.occurrence(paused).control
    assert control is not None and control.state == "paused"
    assert stack.occurrence(cancelled).status.value == "cancelled"
    for occ_id in (taken, paused, cancelled):
        assert worker.logged(f"occurrence {occ_id} not claimable; hint dropped"), occ_id


@pytest.mark.parametrize("stack", ["redis+postgres"], indirect=True)
def test_ids_a_killed_worker_never_started_run_elsewhere_once(stack: Stack) -> None:
    # The pump batches a backlog deeper than kernel_batch_max (16): 24 ids, two messages.
    stack.use_jobs(stack.job("backlog", "record", kwargs={"sleep": 0.4}, lease="60s"))
    doomed = stack.start_worker("doomed", concurrency=1)
    stack.start_beat("beat")
    stack.wait(lambda: stack.kernel.get_job("backlog"), timeout=20, what="the job applied")
    ids = [stack.run_now("backlog") for _ in range(24)]
    stack.wait(lambda: len(stack.ledger()) >= 3, timeout=30, what="three runs of the batch")

    doomed.crash()  # kill -9, mid-batch
    killed_at = time.monotonic()
    unstarted = [i for i in ids if stack.occurrence(i).status.value == "queued"]
    assert len(unstarted) >= 8, unstarted  # the rest of the batch, at least
    stack.start_worker("rescuer", concurrency=2)
    # The killed run's lease (60 s) is far longer than this wait: nothing here waits on it.
    stack.wait(
        lambda: all(stack.occurrence(i).status.value == "succeeded" for i in unstarted),
        timeout=40,
        what="the unstarted ids run by the other worker",
    )
    assert time.monotonic() - killed_at < 50

    for occ_id in unstarted:
        runs = stack.ledger(occurrence_id=occ_id)
        assert [run["fence"] for run in runs] == [1], (occ_id, runs)


def test_a_warm_shutdown_ends_a_batch_after_the_run_under_way(stack: Stack) -> None:
    worker = stack.start_worker("worker", concurrency=1)
    first, *rest = slow_batch(stack, sleep=8, quick=3)

    worker.expected_exit = True
    worker.terminate()  # SIGTERM: Celery's warm shutdown waits for the batch's task
    assert not worker.reap(time.monotonic() + 30), "the worker did not stop on SIGTERM"

    assert stack.occurrence(first).status.value == "succeeded"
    for occ_id in rest:  # never started: queued for the pump to hint again
        assert stack.occurrence(occ_id).status.value == "queued", occ_id
        assert stack.ledger(occurrence_id=occ_id) == [], occ_id


def test_a_batch_of_long_runs_is_shared_with_idle_processes(stack: Stack) -> None:
    # One message of 6 half-second runs on a worker of two processes: after its first two
    # runs the batch sees that the rest would keep the queue waiting past its span and
    # sends them again, one a message, so the idle process takes its share.
    worker = stack.start_worker("worker", concurrency=2)
    stack.define(stack.job("long", "record", kwargs={"sleep": 0.5}, lease="30s"))
    ids = [stack.run_now("long") for _ in range(6)]
    stack.send_hints(*ids)
    stack.wait(
        lambda: all(stack.occurrence(i).status.value == "succeeded" for i in ids),
        timeout=30,
        what="the batch's runs",
    )

    assert len({line["pid"] for line in stack.ledger()}) == 2, stack.ledger()
    for occ_id in ids:
        assert [run["fence"] for run in stack.ledger(occurrence_id=occ_id)] == [1], occ_id
    assert worker.logged("batch runs long: 4 occurrences sent again")
