"""Running one claimed occurrence: claim, execute through its adapter, and the settle that ends it.

The run's lease keeping, safe points and warm-shutdown marker are in
:mod:`celery_app.held_run`; what a failure records beyond its adapter's verdict is in
:mod:`celery_app.run_failures`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from adapters.base import (
    Adapter,
    Cancelled,
    ExecutionContext,
    HandBack,
    Redeliver,
    Replaced,
    bound_message,
)
from adapters.secrets import scrub, scrub_value
from celery_app.held_run import HeldRun, LeaseKeeper, new_owner
from celery_app.run_failures import ask_at_once, job_traceback, timeout_failure
from celery_app.scope import NOT_ALLOWED, UNSCOPED, Scope
from celery_app.warm_shutdown import shutting_down
from kernel import (
    Claim,
    InvalidArgument,
    Kernel,
    LeaseLost,
    OccurrenceStatus,
    SafePoint,
    attempts_left,
)

__all__ = ["RunOutcome", "run_occurrence", "run_occurrences"]

log = logging.getLogger("celery_kernel.runtime")
#: Read once: an enum member's ``.value`` is two Python calls, on every run.
_BEFORE_EXECUTE = SafePoint.BEFORE_EXECUTE.value


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What one hint led to.

    Attributes:
        result: ``succeeded``, ``retry_wait``, ``dead_letter``, ``failed`` (no adapter
            of the occurrence's kind), ``cancelled``, ``handed_back``, ``replaced`` (the
            body's ``self.replace()``: its replacement made), ``lease_lost``,
            ``not_claimable``, ``rehinted`` (a batch's unstarted id sent again) or
            ``rate_limited`` (refused until its rate limit's token is free; sent again then).
        job_id: the occurrence's job, once claimed.
        error_code: set only when the kernel recorded a failure of this run.
        status: the kernel status that failure settled in (``retry_wait`` or ``dead_letter``).
        value: what a run that succeeded returned (secrets masked), for monitors.
    """

    result: str
    job_id: str | None = None
    error_code: str | None = None
    status: str | None = None
    value: Any = None

    def failure(self, occurrence_id: int) -> str:
        """What failed, for people: the job, the error code and the kernel status."""
        return f"job {self.job_id}: {self.error_code}, occurrence {occurrence_id} is {self.status}"


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
    ids = (occurrence_id,)
    return next(
        run_occurrences(kernel, adapters, ids, main_pid=main_pid, keeper=keeper, scope=scope)
    )


def run_occurrences(
    kernel: Kernel,
    adapters: dict[str, Adapter],
    occurrence_ids: Sequence[int],
    *,
    main_pid: int,
    keeper: LeaseKeeper,
    owner: str | None = None,
    on_start: Callable[[Claim], None] | None = None,
    scope: Scope = UNSCOPED,
    rehint: Callable[[list[int], int], None] | None = None,
) -> Iterator[RunOutcome]:
    """Claim, execute and settle each of a hint's occurrences in turn; yields what happened.

    Each is claimed just before it runs, so any other worker may take one first (it is
    then skipped, as a paused or cancelled one is). A success and the next occurrence's
    claim are one transaction. A warm shutdown ends the batch between two runs: the
    occurrences not started stay queued and the pump hints them again. ``on_start`` is
    called with each claim as its run starts. ``rehint(ids, per_message)`` sends a
    batch's unstarted ids to its queue again when its runs are too long to keep them
    (:data:`BATCH_SPAN_S`); they yield ``rehinted``. Without it a batch never splits.
    """
    owner = owner or new_owner()
    carried: _Carried | None = None
    # Only a batch that may pass its rest on is paced (a hint of one id, nearly every one, is not).
    pace = (
        _BatchPace(time.monotonic(), len(occurrence_ids))
        if rehint is not None and len(occurrence_ids) > 1
        else None
    )
    for index, occurrence_id in enumerate(occurrence_ids):
        if carried is None:
            if index and shutting_down(main_pid):
                return
            claimed_at = time.monotonic()
            carried = _Carried(claimed_at, kernel.worker_lane.claim(occurrence_id, owner=owner))
        last = index + 1 == len(occurrence_ids)
        passing_on = pace is not None and not last and pace.runs_long(index)
        following = None if last or passing_on else occurrence_ids[index + 1]
        if on_start is not None and carried.claim is not None:
            on_start(carried.claim)
        outcome, carried = _run_claimed(
            kernel, adapters, occurrence_id, carried, following, main_pid, keeper, scope
        )
        yield outcome
        if passing_on and rehint is not None and pace is not None:
            rest = list(occurrence_ids[index + 1 :])
            rehint(rest, pace.per_message(index))
            yield from (RunOutcome("rehinted") for _ in rest)
            return


#: How long a batch may keep its unstarted ids to itself. A batch whose runs are long
#: enough that the rest would wait past this sends them to its queue again in smaller
#: messages, so that idle processes share them (the last round of a long batch would
#: otherwise run on one process while the others idle).
BATCH_SPAN_S = 0.2


@dataclass(frozen=True, slots=True)
class _BatchPace:
    """A batch's start and size; its runs' pace is judged from the ones already done."""

    started: float
    size: int

    def runs_long(self, index: int) -> bool:
        """Whether the ids after ``index`` would run past :data:`BATCH_SPAN_S` at the pace
        of the ``index`` runs before it (no opinion before the first has run)."""
        if index == 0:
            return False
        per_run = (time.monotonic() - self.started) / index
        return (self.size - index - 1) * per_run > BATCH_SPAN_S

    def per_message(self, done: int) -> int:
        """Ids per message for the rest: as many as run within the span at this pace."""
        per_run = (time.monotonic() - self.started) / (done + 1)
        return max(1, int(BATCH_SPAN_S / per_run))


@dataclass(slots=True)
class _Carried:
    """A claim and when it was asked for (the lease is measured from no earlier than this)."""

    claimed_at: float
    claim: Claim | None


def _run_claimed(
    kernel: Kernel,
    adapters: dict[str, Adapter],
    occurrence_id: int,
    carried: _Carried,
    following: int | None,
    main_pid: int,
    keeper: LeaseKeeper,
    scope: Scope,
) -> tuple[RunOutcome, _Carried | None]:
    claim = carried.claim
    if claim is None:
        log.info(
            "occurrence %s not claimable; hint dropped",
            occurrence_id,
            extra={"action": "claim_refused", "occurrence_id": occurrence_id},
        )
        return RunOutcome("not_claimable"), None
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
        return RunOutcome("failed", occurrence.job_id, "ADAPTER_UNKNOWN", status), None
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
        return RunOutcome("failed", occurrence.job_id, NOT_ALLOWED, status), None
    timeout = scope.timeout_of(occurrence.definition)
    run = HeldRun(kernel, claim, adapter, main_pid, carried.claimed_at, timeout)
    keeper.add(run)
    try:
        return _execute(run, following)
    finally:
        keeper.remove(run)


def _execute(run: HeldRun, following: int | None) -> tuple[RunOutcome, _Carried | None]:
    """Run the claimed occurrence and settle it; on success claim ``following`` with the settle."""
    claim, adapter, kernel = run.claim, run.adapter, run.kernel
    occurrence = claim.occurrence
    ctx = ExecutionContext(
        occurrence,
        resumed=claim.checkpoint,
        redelivered=claim.resumed,
        cancelled=run.cancel_event,
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
        run.on_safe_point(_BEFORE_EXECUTE, claim.checkpoint)
        result = adapter.resume(ctx) if claim.checkpoint is not None else adapter.execute(ctx)
    except Redeliver:
        if run.fenced:
            return _fenced_off(run), None
        try:
            run.redeliver()
        except LeaseLost as exc:
            return _settle_refused(run, exc), None
        return RunOutcome("handed_back", occurrence.job_id), None
    except HandBack:
        return RunOutcome("handed_back", occurrence.job_id), None
    except Replaced as replaced:
        return _replaced(run, replaced), None
    except Exception as exc:  # job code may raise anything; the adapter classifies it
        if run.fenced:
            return _fenced_off(run), None
        if run.timed_out and isinstance(exc, Cancelled):
            exc = TimeoutError(f"timed out after {run.timeout_s:g}s ({run.timeout_from})")
        elif run.cancel_seen and isinstance(exc, Cancelled):
            run.output.flush()
            kernel.cancelled(occurrence.id, owner=owner, fence=fence)
            return RunOutcome("cancelled", occurrence.job_id), None
        error = timeout_failure(exc, ctx.timeout_s) or adapter.classify_error(exc)
        message = bound_message(scrub(error.message, ctx.secrets))
        trace = job_traceback(exc, ctx.secrets)
        final = not error.retryable or not attempts_left(
            occurrence.attempt, occurrence.max_attempts
        )
        # Logged as Celery logs a task's failure: with its traceback, at ERROR when final.
        run.log.log(
            logging.ERROR if final else logging.WARNING,
            "run failed: %s %s%s",
            error.code,
            message,
            f"\n{trace}" if trace else "",
            extra={"action": "run_failed"},
        )
        try:
            run.output.flush(final=True)
            status = kernel.fail(
                occurrence.id,
                code=error.code,
                message=message,
                retryable=error.retryable,
                effect=error.effect,
                owner=owner,
                fence=fence,
                retry_in=error.retry_in,
                retry_with=error.retry_with,
                traceback=trace,
            )
        except LeaseLost as exc:
            return _settle_refused(run, exc), None
        if status == OccurrenceStatus.NEEDS_ADJUDICATION:
            ask_at_once(kernel, adapter, occurrence)
        return RunOutcome(status, occurrence.job_id, error.code, status), None
    if run.fenced:
        return _fenced_off(run), None
    try:
        run.output.flush(final=True)
        if ctx.secrets:  # a reply or return value may echo a secret the run was handed
            result = scrub_value(result, ctx.secrets)
        # A warm shutdown that began during the run ends the batch here: settle alone.
        if following is None or run.shutting_down():
            kernel.worker_lane.succeed(occurrence.id, owner=owner, fence=fence, result=result)
            carried = None
        else:
            claimed_at = time.monotonic()
            next_claim = kernel.succeed_and_claim(
                occurrence.id, owner=owner, fence=fence, result=result, next_occurrence_id=following
            )
            carried = _Carried(claimed_at, next_claim)
    except LeaseLost as exc:
        return _settle_refused(run, exc), None
    return RunOutcome("succeeded", occurrence.job_id, value=result), carried


def _replaced(run: HeldRun, replaced: Replaced) -> RunOutcome:
    """Settle a run that replaced itself, making its replacement in the same transaction
    (:meth:`kernel.Kernel.replace`); one the kernel refuses fails the run for good."""
    if run.fenced:
        return _fenced_off(run)
    kernel, claim = run.kernel, run.claim
    occurrence = claim.occurrence
    try:
        run.output.flush(final=True)
        try:
            made = kernel.replace(
                occurrence.id,
                owner=claim.owner,
                fence=claim.fence,
                replacement=replaced.replacement,
                task_id=replaced.task_id,
            )
        except InvalidArgument as exc:
            run.log.error("replacement refused: %s", exc, extra={"action": "run_failed"})
            status = kernel.fail(
                occurrence.id, owner=claim.owner, fence=claim.fence, code="REPLACE_REFUSED",
                message=bound_message(exc.message), retryable=False,
            )  # fmt: skip
            return RunOutcome(status, occurrence.job_id, "REPLACE_REFUSED", status)
    except LeaseLost as exc:
        return _settle_refused(run, exc)
    run.log.info(
        "replaced: its replacement is occurrence(s) %s",
        ", ".join(map(str, made)),
        extra={"action": "run_replaced"},
    )
    return RunOutcome("replaced", occurrence.job_id)


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
