"""A run's ``ctx.cancelled`` is made on the job's first look, and a cancel the lease keeper
sets before, after or while it is made is seen (session 24: made per run before, for
job code that mostly never looks; ``cancel_event`` did not exist)."""

from __future__ import annotations

import os
import threading
import time

from adapters.base import ExecutionContext
from adapters.callable import CallableAdapter
from celery_app.held_run import HeldRun
from kernel import Kernel


def _held(kernel: Kernel, lease: float = 30) -> HeldRun:
    kernel.define_job({"id": "j", "kind": "callable", "payload": {"callable": "os.path:join"}})
    occ = kernel.run_now("j", request_id=f"r{time.monotonic()}", operator="t", force=True)
    claim = kernel.claim(occ.occurrence.id, owner="w1", lease=lease)
    assert claim is not None
    return HeldRun(kernel, claim, CallableAdapter(), os.getpid(), time.monotonic())


def test_a_cancel_before_the_first_look_is_seen(kernel: Kernel) -> None:
    run = _held(kernel)
    assert not run.cancel_seen
    run._cancel()  # the keeper: a cancel came with a renewal
    assert run.cancel_seen
    event = run.cancel_event()
    assert event.is_set() and run.cancel_event() is event


def test_a_cancel_after_the_first_look_sets_the_event(kernel: Kernel) -> None:
    run = _held(kernel)
    event = run.cancel_event()
    assert not event.is_set()
    run._cancel()
    assert event.is_set() and event.wait(0)


def test_an_event_job_code_set_itself_reads_as_cancelled(kernel: Kernel) -> None:
    run = _held(kernel)
    run.cancel_event().set()  # the job's own code stopping itself, as an Event allows
    assert run.cancel_seen


def test_the_self_fencing_moment_reads_as_cancelled_with_or_without_the_event(
    kernel: Kernel,
) -> None:
    run = _held(kernel)
    run.renewed_at -= 3600  # its lease long past: the run must stop its effects
    assert run.cancel_seen
    assert run.cancel_event().is_set()


def test_a_cancel_racing_the_first_look_is_never_missed(kernel: Kernel) -> None:
    runs = [_held(kernel) for _ in range(200)]
    events: list[threading.Event] = []
    start = threading.Barrier(2)

    def keeper() -> None:
        start.wait()
        for run in runs:
            run._cancel()

    thread = threading.Thread(target=keeper)
    thread.start()
    start.wait()
    events.extend(run.cancel_event() for run in runs)
    thread.join()
    assert all(event.is_set() for event in events)


def test_the_context_makes_its_event_once_on_first_use(kernel: Kernel) -> None:
    run = _held(kernel)
    made: list[threading.Event] = []

    def make() -> threading.Event:
        made.append(run.cancel_event())
        return made[-1]

    ctx = ExecutionContext(
        run.claim.occurrence,
        resumed=None,
        cancelled=make,
        on_safe_point=run.on_safe_point,
        logger=run.log,
        timeout_s=None,
    )
    assert made == []
    assert ctx.cancelled is ctx.cancelled and len(made) == 1
