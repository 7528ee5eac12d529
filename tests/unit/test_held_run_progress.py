"""A run's checkpoints ride on its lease keeper's renewals: kept (copied, bounded) at the
call, stored by the next renewal, the newest of several; no write of their own."""

from __future__ import annotations

import os
import time

import pytest

from adapters.callable import CallableAdapter
from celery_app.held_run import HeldRun
from kernel import InvalidArgument, Kernel


def _held(kernel: Kernel) -> HeldRun:
    kernel.define_job({"id": "j", "kind": "callable", "payload": {"callable": "os.path:join"}})
    occ = kernel.run_now("j", request_id="r", operator="t", force=True).occurrence.id
    claim = kernel.claim(occ, owner="w1", lease=30)
    assert claim is not None
    return HeldRun(kernel, claim, CallableAdapter(), os.getpid(), time.monotonic())


def _renew(run: HeldRun) -> None:
    run.next_renew = 0.0  # due now
    run.renew_if_due()
    assert not run.lease_lost


def test_the_next_renewal_stores_the_newest_checkpoint(kernel: Kernel) -> None:
    run = _held(kernel)
    occ = run.claim.occurrence.id
    progress = {"done": 1}
    run.on_safe_point("adapter_checkpoint", progress)
    progress["done"] = 99  # the job's own object, changed after the call
    assert kernel.get_occurrence(occ).checkpoint is None  # nothing written per call
    _renew(run)
    assert kernel.get_occurrence(occ).checkpoint == {"done": 1}

    run.on_safe_point("adapter_checkpoint", {"done": 2})
    run.on_safe_point("adapter_checkpoint", {"done": 3})
    run.on_safe_point("before_execute", {"done": 0})  # what the claim handed over: no progress
    run.on_safe_point("adapter_checkpoint", None)  # a safe point without progress
    _renew(run)
    assert kernel.get_occurrence(occ).checkpoint == {"done": 3}
    assert run.progress is None
    _renew(run)  # nothing new: the stored one stays
    assert kernel.get_occurrence(occ).checkpoint == {"done": 3}


def test_a_checkpoint_over_64_kib_is_refused_at_the_call(kernel: Kernel) -> None:
    run = _held(kernel)
    run.on_safe_point("adapter_checkpoint", {"done": 1})
    with pytest.raises(InvalidArgument) as refused:
        run.on_safe_point("adapter_checkpoint", {"blob": "x" * (64 * 1024)})
    assert refused.value.field == "checkpoint"
    _renew(run)  # the renewal is not the one to fail: it stores the last good one
    assert kernel.get_occurrence(run.claim.occurrence.id).checkpoint == {"done": 1}
