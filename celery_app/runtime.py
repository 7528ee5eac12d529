"""Running one claimed occurrence: claim, execute through its adapter, and the settle that ends it.

The run's lease keeping and safe points are :mod:`celery_app.held_run`; the warm-shutdown
marker is :mod:`celery_app.warm_shutdown` (both importable from here, as before).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass

from billiard.exceptions import SoftTimeLimitExceeded

from adapters.base import Adapter, Cancelled, ErrorClass, ExecutionContext, HandBack
from adapters.secrets import scrub, scrub_value
from celery_app.held_run import HeldRun, LeaseKeeper
from celery_app.scope import NOT_ALLOWED, UNSCOPED, Scope
from celery_app.warm_shutdown import clear_warm_shutdown, request_warm_shutdown, shutdown_marker
from kernel import (
    Effect,
    Kernel,
    LeaseLost,
    Occurrence,
    OccurrenceStatus,
    SafePoint,
    StorageUnavailable,
)

__all__ = [
    "LeaseKeeper",
    "RunOutcome",
    "run_occurrence",
    "shutdown_marker",
    "request_warm_shutdown",
    "clear_warm_shutdown",
]

log = logging.getLogger("celery_kernel.runtime")


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What one hint led to.

    Attributes:
        result: ``succeeded``, ``retry_wait``, ``dead_letter``, ``failed`` (no adapter
            of the occurrence's kind), ``cancelled``, ``handed_back``, ``lease_lost``
            or ``not_claimable``.
        job_id: the occurrence's job, once claimed.
        error_code: set only when the kernel recorded a failure of this run.
        status: the kernel status that failure settled in (``retry_wait`` or ``dead_letter``).
    """

    result: str
    job_id: str | None = None
    error_code: str | None = None
    status: str | None = None


def new_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def run_occurrence(
    kernel: Kernel,
    adapters: dict[str, Adapter],
    occurrence_id: int,
    *,
    main_pid: int,
    keeper: LeaseKeeper,
    scope: Scope = UNSCOPED,
) -> RunOutcome:
    """Claim, execute and settle one occurrence. Returns what happened, for the task.

    A message for an occurrence that is not claimable is dropped without side
    effects: the broker message is only a hint.
    """
    claimed_at = time.monotonic()  # the lease is measured from no earlier than this
    claim = kernel.claim(occurrence_id, owner=new_owner())
    if claim is None:
        log.info(
            "occurrence %s not claimable; hint dropped",
            occurrence_id,
            extra={"action": "claim_refused", "occurrence_id": occurrence_id},
        )
        return RunOutcome("not_claimable")
    occurrence = claim.occurrence
    adapter = adapters.get(occurrence.kind)
    if adapter is None:
        status = kernel.fail(
            occurrence.id,
            owner=claim.owner,
            fence=claim.fence,
            code="ADAPTER_UNKNOWN",
            message=f"no adapter of kind {occurrence.kind!r} is installed on this worker",
            retryable=True,
        )
        return RunOutcome("failed", occurrence.job_id, "ADAPTER_UNKNOWN", status)
    refused = scope.refusal(occurrence.kind, occurrence.payload)
    if refused is not None:  # this worker's own settings: the definition may predate them
        status = kernel.fail(
            occurrence.id,
            owner=claim.owner,
            fence=claim.fence,
            code=NOT_ALLOWED,
            message=f"{refused[1]}; not run",
            retryable=False,
        )
        return RunOutcome("failed", occurrence.job_id, NOT_ALLOWED, status)
    run = HeldRun(kernel, claim, adapter, main_pid, claimed_at)
    keeper.add(run)
    try:
        return _execute(run)
    finally:
        keeper.remove(run)


def _execute(run: HeldRun) -> RunOutcome:
    claim, adapter, kernel = run.claim, run.adapter, run.kernel
    occurrence = claim.occurrence
    ctx = ExecutionContext(
        occurrence,
        resumed=claim.checkpoint,
        cancelled=run.cancelled,
        on_safe_point=run.on_safe_point,
        logger=run.log,
        timeout_s=run.timeout_s,
        kill_grace_s=run.kill_grace_s,
        effects_deadline=run.effects_deadline,
        on_output=run.output.write,
        adjudication=lambda: kernel.last_adjudication(occurrence.id),
    )
    run.output.secrets = ctx.secrets
    owner, fence = claim.owner, claim.fence
    try:
        run.on_safe_point(SafePoint.BEFORE_EXECUTE.value, claim.checkpoint)
        result = adapter.resume(ctx) if claim.checkpoint is not None else adapter.execute(ctx)
    except HandBack:
        return RunOutcome("handed_back", occurrence.job_id)
    except Exception as exc:  # job code may raise anything; the adapter classifies it
        if run.fenced:
            return _fenced_off(run)
        if run.timed_out and isinstance(exc, Cancelled):
            exc = TimeoutError(f"timed out after {run.timeout_s}s")
        elif run.cancelled.is_set() and isinstance(exc, Cancelled):
            run.output.flush()
            kernel.cancelled(occurrence.id, owner=owner, fence=fence)
            return RunOutcome("cancelled", occurrence.job_id)
        verdict = _timed_out(exc, ctx.timeout_s) or adapter.classify_error(exc)
        message = scrub(verdict.message, ctx.secrets)
        run.log.warning("run failed: %s %s", verdict.code, message, extra={"action": "run_failed"})
        try:
            run.output.flush(final=True)
            status = kernel.fail(
                occurrence.id,
                code=verdict.code,
                message=message,
                retryable=verdict.retryable,
                effect=verdict.effect,
                owner=owner,
                fence=fence,
            )
        except LeaseLost as exc:
            return _settle_refused(run, exc)
        if status == OccurrenceStatus.NEEDS_ADJUDICATION:
            _ask_at_once(kernel, adapter, occurrence)
        return RunOutcome(status, occurrence.job_id, verdict.code, status)
    if run.fenced:
        return _fenced_off(run)
    try:
        run.output.flush(final=True)
        if ctx.secrets:  # a reply or return value may echo a secret the run was handed
            result = scrub_value(result, ctx.secrets)
        kernel.succeed(occurrence.id, owner=owner, fence=fence, result=result)
    except LeaseLost as exc:
        return _settle_refused(run, exc)
    return RunOutcome("succeeded", occurrence.job_id)


def _timed_out(exc: BaseException, timeout_s: float | None) -> ErrorClass | None:
    """A TIMEOUT failure when Celery's soft time limit (the job's timeout) stopped the body,
    whether it surfaced as itself or as the cause of an adapter's error."""
    if not isinstance(exc, SoftTimeLimitExceeded) and not isinstance(
        exc.__cause__, SoftTimeLimitExceeded
    ):
        return None
    limit = f"{timeout_s:g} s" if timeout_s is not None else "its time limit"
    return ErrorClass(True, "TIMEOUT", f"the run exceeded its timeout of {limit}", Effect.UNKNOWN)


def _ask_at_once(kernel: Kernel, adapter: Adapter, occurrence: Occurrence) -> None:
    """The run's outcome is unknown and it may not repeat: its adapter is asked now, by this
    worker, as Beat's pump would hint it (``kernel.adjudicate_occurrence``); whoever takes
    the ask first asks, the other finds it taken."""
    # Imported here: celery_app.adjudication imports this module.
    from celery_app.adjudication import ask_adapter

    try:
        ask_adapter(kernel, {occurrence.kind: adapter}, occurrence.id, occurrence.kind)
    except StorageUnavailable as exc:
        log.warning(
            "occurrence %s needs adjudication; its adapter could not be asked now (%s): "
            "Beat's pump hints the ask",
            occurrence.id,
            exc,
            extra={"action": "storage_unavailable", "occurrence_id": occurrence.id},
        )


def _fenced_off(run: HeldRun) -> RunOutcome:
    """No settle after a lost or self-fenced lease: the lease's expiry decides (I6)."""
    occurrence = run.claim.occurrence
    run.log.warning(
        "LEASE_LOST: occurrence %s: fence %s may no longer hold its lease; the run stopped "
        "and does not settle",
        occurrence.id,
        run.claim.fence,
        extra={"action": "lease_lost"},
    )
    return RunOutcome("lease_lost", occurrence.job_id)


def _settle_refused(run: HeldRun, exc: LeaseLost) -> RunOutcome:
    run.log.warning(
        "finished after losing the lease; outcome discarded: %s",
        exc,
        extra={"action": "settle_refused"},
    )
    return RunOutcome("lease_lost", run.claim.occurrence.job_id)
