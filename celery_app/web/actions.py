"""Every action the API and the console offer: its role, its parameters, what it does.

Both surfaces look actions up here, so an action is refused to the same roles and
validated by the same model whether it came as JSON or as a form. Actions on an
occurrence and ``run-now`` are idempotent by request id exactly as on the CLI (a
missing id is generated); the admin actions are idempotent by nature (enabling an
enabled job changes nothing) or refuse a repeat (deleting a deleted job).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from celery_app import operations
from celery_app.web.users import Role, User
from kernel import Decision, Kernel
from kernel.durations import parse_duration

__all__ = [
    "ACTIONS",
    "ActionRequest",
    "AdjudicateRequest",
    "Empty",
    "PauseRequest",
    "PruneRequest",
    "RequeueRequest",
    "ResumeRequest",
    "WebAction",
]

_DB_INT_MAX = 2**63 - 1


def _db_int(description: str) -> Any:
    """An optional non-negative integer that fits the database's BIGINT."""
    return Field(default=None, ge=0, le=_DB_INT_MAX, description=description)


class Empty(BaseModel):
    """No parameters."""

    model_config = ConfigDict(extra="forbid")


class ActionRequest(Empty):
    request_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description="Idempotency key: a retry with the same id is answered, not redone "
        "(default: a new id, returned).",
    )


class PauseRequest(ActionRequest):
    fence: int | None = _db_int("Pause only the run under this fence (default: the current one).")


class RunNowRequest(ActionRequest):
    force: bool = Field(
        default=False, description="Run even if the overlap policy or max_queued refuses it."
    )


class ResumeRequest(ActionRequest):
    revision: int | None = _db_int("Resume only if the control is still at this revision.")


class RequeueRequest(ActionRequest):
    fence: int | None = _db_int("Expected fence (default: the current one).")
    error_code: str | None = Field(
        default=None, max_length=128, description="Expected last error code (default: current)."
    )


class AdjudicateRequest(ActionRequest):
    decision: Decision = Field(
        description="applied: it happened; not_applied: run it again; abandon: dead letter."
    )


class PruneRequest(Empty):
    older_than: str = Field(
        min_length=1, max_length=32, description="Delete settled history older than this (30d)."
    )
    limit: int = Field(default=10_000, ge=1, le=1_000_000)


@dataclass(frozen=True, slots=True)
class WebAction:
    """One action: who may run it, on what, with which parameters."""

    name: str
    target: Literal["occurrence", "job", "kernel"]
    role: Role
    params: type[Empty]
    summary: str
    # (kernel, celery app, target id, params, operator) -> the JSON answer
    run: Callable[[Kernel, Any, Any, Any, User], dict[str, Any]]


def _by_request(
    build: Callable[[Kernel, Any, Any, Any], operations.Action],
) -> Callable[[Kernel, Any, Any, Any, User], dict[str, Any]]:
    """An action idempotent by request id, recorded under the user's name."""

    def run(kernel: Kernel, app: Any, target: Any, params: Any, user: User) -> dict[str, Any]:
        request_id = params.request_id or operations.new_request_id()
        return operations.act(app, request_id, user.name, build(kernel, app, target, params))

    return run


def _actions(*found: WebAction) -> dict[str, WebAction]:
    return {action.name: action for action in found}


ACTIONS = _actions(
    WebAction(
        "pause",
        "occurrence",
        Role.OPERATOR,
        PauseRequest,
        "Ask a running occurrence to pause at its next safe point.",
        _by_request(lambda k, app, occ, p: operations.pause(k, app, occ, p.fence)),
    ),
    WebAction(
        "resume",
        "occurrence",
        Role.OPERATOR,
        ResumeRequest,
        "Make a paused occurrence claimable; it resumes from its checkpoint.",
        _by_request(lambda k, app, occ, p: operations.resume(k, occ, p.revision)),
    ),
    WebAction(
        "requeue",
        "occurrence",
        Role.OPERATOR,
        RequeueRequest,
        "Give a dead letter one more run, consuming no attempt.",
        _by_request(lambda k, app, occ, p: operations.requeue(k, occ, p.fence, p.error_code)),
    ),
    WebAction(
        "adjudicate",
        "occurrence",
        Role.OPERATOR,
        AdjudicateRequest,
        "Decide an at-most-once occurrence whose outcome is unknown.",
        _by_request(lambda k, app, occ, p: operations.adjudicate(k, occ, p.decision.value)),
    ),
    WebAction(
        "cancel",
        "occurrence",
        Role.OPERATOR,
        ActionRequest,
        "Cancel a waiting occurrence, or ask a running one to stop.",
        _by_request(lambda k, app, occ, p: operations.cancel(k, occ)),
    ),
    WebAction(
        "run-now",
        "job",
        Role.OPERATOR,
        RunNowRequest,
        "Create an occurrence now (also for a disabled job); the schedule is not disturbed.",
        _by_request(lambda k, app, job, p: operations.run_now(k, job, p.force)),
    ),
    WebAction(
        "enable",
        "job",
        Role.ADMIN,
        Empty,
        "Enable a job; Beat plans it from now.",
        lambda k, app, job, p, user: operations.set_job_enabled(k, job, True),
    ),
    WebAction(
        "disable",
        "job",
        Role.ADMIN,
        Empty,
        "Disable a job: no new firings; run-now still works.",
        lambda k, app, job, p, user: operations.set_job_enabled(k, job, False),
    ),
    WebAction(
        "delete",
        "job",
        Role.ADMIN,
        Empty,
        "Delete a job definition (refused while it has unsettled occurrences).",
        lambda k, app, job, p, user: operations.delete_job(k, job),
    ),
    WebAction(
        "prune",
        "kernel",
        Role.ADMIN,
        PruneRequest,
        "Delete settled history older than a duration; dead letters are never pruned.",
        lambda k, app, _, p, user: operations.prune(
            k, app, parse_duration(p.older_than, "older_than"), p.limit
        ),
    ),
)
