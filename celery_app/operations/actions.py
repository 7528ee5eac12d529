"""Operator actions: each builds an :data:`Action` for :func:`act`, which runs it under a
request id and shapes its result; refusals carry the request id."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from adapters import load_adapters
from adapters.registry import declared_safe_points
from kernel import (
    ActionResult,
    Kernel,
    KernelError,
    Occurrence,
    OccurrenceStatus,
    PauseUnsupported,
    SafePoint,
    text,
)

__all__ = [
    "Action",
    "new_request_id",
    "act",
    "safe_points",
    "pause",
    "pause_refusal",
    "resume",
    "requeue",
    "adjudicate",
    "cancel",
    "run_now",
    "decide_approval",
    "cancel_job",
]


_IDENT = text(128)


Action = Callable[[str, str], ActionResult]


def new_request_id() -> str:
    """A fresh idempotency key for an action whose caller gave none."""
    return uuid.uuid4().hex


def act(app: Any, request_id: str, operator: str, action: Action) -> dict[str, Any]:
    """Run ``action(request_id, operator)``; the result as the CLI's ``--json`` shows it.

    A replay with the same request id is answered ``deduplicated`` by the kernel; a
    refusal carries the request id so an uncertain outcome can be retried. A running
    occurrence asked to stop gets a ``note`` saying how it will stop.
    """
    rid = _IDENT(request_id, "request_id")
    who = _IDENT(operator, "operator")
    try:
        result = action(rid, who)
    except KernelError as exc:
        exc.details.setdefault("request_id", rid)
        raise
    occ = result.occurrence
    data: dict[str, Any] = {
        "request_id": result.request_id,
        "deduplicated": result.deduplicated,
        "operator": who,
        "occurrence": occ.to_dict(),
    }
    if occ.status == OccurrenceStatus.RUNNING and occ.cancel_requested:
        data["note"] = _stop_note(app, occ)
    return data


def _stop_note(app: Any, occ: Occurrence) -> str:
    if set(safe_points(app, occ)) <= {_BEFORE_EXECUTE}:
        return (
            f"it runs {_what_runs(occ)}, which has no safe point while it runs: "
            "it will finish its current run, which is recorded as it ends and not retried"
        )
    return "it will stop at its next safe point (or finish, if it reaches none)"


_BEFORE_EXECUTE = SafePoint.BEFORE_EXECUTE.value


def safe_points(app: Any, occ: Occurrence) -> tuple[str, ...]:
    """What the occurrence's adapter declares for its payload (none if not installed here)."""
    adapter = load_adapters(app).get(occ.kind)
    return declared_safe_points(adapter, occ.payload) if adapter is not None else ()


def _what_runs(occ: Occurrence) -> str:
    task = occ.payload.get("task") if occ.kind == "task" else None
    return f"task {task!r}" if task else f"a {occ.kind!r} job"


def pause_refusal(app: Any, occ: Occurrence) -> str | None:
    """Why ``occ`` cannot be paused by what it runs, or None when its adapter can pause it.

    The console shows this instead of a Pause button; :func:`pause` refuses with it.
    """
    declared = safe_points(app, occ)
    if not declared:
        return (
            f"occurrence {occ.id} runs a {occ.kind!r} adapter, which declares no safe point "
            "(or is not installed where this runs); it cannot be paused. Cancel it instead"
        )
    if occ.status == OccurrenceStatus.RUNNING and set(declared) <= {_BEFORE_EXECUTE}:
        # Its only safe point is behind it: accepting would leave the request pending
        # until the run ends on its own.
        return (
            f"occurrence {occ.id} is running {_what_runs(occ)}, which has no safe point "
            "while it runs (a task opts in with kernel_checkpoints=True and calls "
            "current_run.checkpoint()); it cannot be paused now. Cancel it instead: it "
            "will finish its current run"
        )
    return None


def pause(kernel: Kernel, app: Any, occurrence_id: int, fence: int | None = None) -> Action:
    """Ask a running occurrence to pause (only the run under ``fence``, when given)."""

    def run(rid: str, who: str) -> ActionResult:
        occ = kernel.get_occurrence(occurrence_id)
        refused = pause_refusal(app, occ)
        if refused is not None:
            raise PauseUnsupported(refused, occurrence_id=occurrence_id)
        return kernel.request_pause(
            occurrence_id,
            expected_fence=fence,  # only what the caller gave is evidence (SPEC I7)
            request_id=rid,
            safe_points=safe_points(app, occ),
            operator=who,
        )

    return run


def resume(kernel: Kernel, occurrence_id: int, revision: int | None = None) -> Action:
    """Make a paused occurrence claimable again (only at control ``revision`` if given)."""
    return lambda rid, who: kernel.resume(
        occurrence_id, request_id=rid, operator=who, expected_revision=revision
    )


def requeue(
    kernel: Kernel, occurrence_id: int, fence: int | None = None, error_code: str | None = None
) -> Action:
    """Give a dead letter one more run (only if ``fence``/``error_code`` hold, when given).

    Only what the caller gave is evidence (SPEC I7): a replay of the request after the
    state moved on is answered with the first result, not refused.
    """
    return lambda rid, who: kernel.requeue(
        occurrence_id,
        expected_fence=fence,
        expected_error_code=error_code,
        request_id=rid,
        operator=who,
    )


def adjudicate(kernel: Kernel, occurrence_id: int, decision: str) -> Action:
    """Decide an at-most-once occurrence whose outcome is unknown."""
    return lambda rid, who: kernel.adjudicate(
        occurrence_id, decision=decision, request_id=rid, operator=who
    )


def cancel(kernel: Kernel, occurrence_id: int) -> Action:
    """Cancel a waiting occurrence, or ask a running one to stop."""
    return lambda rid, who: kernel.cancel(occurrence_id, request_id=rid, operator=who)


def run_now(
    kernel: Kernel, job_id: str, force: bool = False, params: dict[str, Any] | None = None
) -> Action:
    """Create an occurrence of a job now (also for a disabled job), admitted like a firing
    (overlap policy, ``max_queued``) unless ``force``; ``params`` are merged into its
    payload only."""
    return lambda rid, who: kernel.run_now(
        job_id, request_id=rid, operator=who, force=force, params=params
    )


def decide_approval(
    kernel: Kernel, occurrence_id: int, approved: bool, reason: str | None = None
) -> Action:
    """Let an occurrence awaiting approval run (``approved``: it is queued) or refuse it
    (it is skipped, reason ``approval_rejected``)."""
    decide = kernel.approve if approved else kernel.reject
    return lambda rid, who: decide(occurrence_id, request_id=rid, operator=who, reason=reason)


def cancel_job(
    kernel: Kernel, job_id: str, cascade: bool, request_id: str, operator: str
) -> dict[str, Any]:
    """Disable a job and cancel its work (``cascade``: also of the jobs chained after it)."""
    rid = _IDENT(request_id, "request_id")
    who = _IDENT(operator, "operator")
    try:
        done = kernel.cancel_job(job_id, cascade=cascade, request_id=rid, operator=who)
    except KernelError as exc:
        exc.details.setdefault("request_id", rid)
        raise
    return {
        "request_id": done.request_id,
        "deduplicated": done.deduplicated,
        "operator": who,
        "job_id": job_id,
        "cascade": cascade,
        "jobs": list(done.jobs),
        "disabled": list(done.disabled),
        "cancelled": list(done.cancelled),
        "stopping": list(done.stopping),
    }
