"""Every action the API and the console offer: its role, its parameters, what it does.

Both surfaces look actions up here, so an action is refused to the same roles and
validated by the same model whether it came as JSON or as a form. Actions on an
occurrence and ``run-now`` are idempotent by request id exactly as on the CLI (a
missing id is generated); the admin actions are idempotent by nature (enabling an
enabled job or applying the same definition again changes nothing, a repeated revision
with the same expected revision is refused) or refuse a repeat (deleting a deleted job).
Adding an action is one row of :data:`ACTIONS` (its API route, console button and
confirmation form follow; a parameter beyond ``request_id`` also needs its input in
``confirm.html``) and one row of the authorization matrix test.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from celery_app import operations
from celery_app.definitions import apply_specs, web_spec
from celery_app.web.users import Role, User
from kernel import ACTIVE, Decision, Kernel, parse_duration

__all__ = [
    "ACTIONS",
    "ActionRequest",
    "AdjudicateRequest",
    "ApplyRequest",
    "BackfillRequest",
    "Empty",
    "PauseRequest",
    "PruneRequest",
    "PoolLimitRequest",
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
    params: dict[str, Any] | None = Field(
        default=None,
        description="This run's arguments (args, kwargs; an http job's json or body), merged "
        "into its payload only (JSON Merge Patch) and validated as the payload is; any other "
        "field is the job's definition and refused. A retry with the same request id and "
        "other params is refused.",
    )


class BackfillRequest(Empty):
    # The API says from/to; the console's form (which posts fields by name) start/end.
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    start: datetime = Field(alias="from", description="First instant of the range (UTC if naive).")
    end: datetime = Field(alias="to", description="Last instant of the range (UTC if naive).")
    params: dict[str, Any] | None = Field(
        default=None,
        description="Each new occurrence's arguments (args, kwargs; an http job's json or "
        "body), merged into its payload (JSON Merge Patch); any other field is refused.",
    )
    max: int | None = Field(
        default=None, ge=1, le=100_000, description="Make at most the first N firings."
    )
    dry_run: bool = Field(default=False, description="List the firings and which exist.")
    sequential: bool = Field(
        default=False, description="Queue them all to run one at a time in firing order."
    )

    @field_validator("params", "max", mode="before")
    @classmethod
    def _from_form(cls, value: Any) -> Any:
        """The console's form sends the params (and a number) as text."""
        return _json_text(value) if isinstance(value, str) else value


def _backfill(kernel: Kernel, job_id: str, p: BackfillRequest, user: User) -> dict[str, Any]:
    return operations.backfill(
        kernel,
        job_id,
        operations.utc(p.start),
        operations.utc(p.end),
        params=p.params,
        max_firings=p.max,
        dry_run=p.dry_run,
        sequential=p.sequential,
        operator=user.name,
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


class PoolLimitRequest(Empty):
    name: str = Field(min_length=1, max_length=128, description="The pool's name.")
    limit: int = Field(ge=1, description="Occurrences of the pool that may run at once.")


class ApplyRequest(Empty):
    spec: dict[str, Any] = Field(
        description="The job definition, as one job of a job file (`kernel jobs schema`); "
        "its id may be left out (the path names the job). JSON text is accepted too."
    )
    expected_revision: int | None = Field(
        default=None,
        ge=1,
        le=_DB_INT_MAX,
        description="Revise only if the job is still at this revision (REVISION_CONFLICT "
        "otherwise); without it the definition is applied as `kernel jobs apply` does.",
    )
    dry_run: bool = Field(default=False, description="Validate and say what would change.")
    allow_kinds: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(
        default_factory=list,
        max_length=32,
        description="Kinds installed only on the workers (`--allow-kind`).",
    )

    @field_validator("spec", mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        """The console's form sends the definition as JSON text."""
        return _json_text(value) if isinstance(value, str) else value


def _json_text(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None


def _always(_: dict[str, Any]) -> bool:
    return True


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
    # Whether the console offers it for the target as shown (its JSON); the server
    # decides whatever is posted.
    offered: Callable[[dict[str, Any]], bool] = _always


def _control(occ: dict[str, Any]) -> Any:
    return (occ["control"] or {}).get("state")


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


def _approval(name: str, approved: bool, description: str) -> WebAction:
    """The approve or reject action: one decision on an occurrence awaiting approval."""
    return WebAction(
        name,
        "occurrence",
        Role.OPERATOR,
        ActionRequest,
        description,
        _by_request(lambda k, app, occ, p: operations.decide_approval(k, occ, approved)),
        offered=lambda occ: occ["status"] == "awaiting_approval",
    )


ACTIONS = _actions(
    WebAction(
        "pause",
        "occurrence",
        Role.OPERATOR,
        PauseRequest,
        "Ask a running occurrence to pause at its next safe point.",
        _by_request(lambda k, app, occ, p: operations.pause(k, app, occ, p.fence)),
        offered=lambda occ: occ["status"] == "running" and _control(occ) != "pause_requested",
    ),
    WebAction(
        "resume",
        "occurrence",
        Role.OPERATOR,
        ResumeRequest,
        "Make a paused occurrence claimable; it resumes from its checkpoint.",
        _by_request(lambda k, app, occ, p: operations.resume(k, occ, p.revision)),
        offered=lambda occ: _control(occ) == "paused",
    ),
    WebAction(
        "requeue",
        "occurrence",
        Role.OPERATOR,
        RequeueRequest,
        "Give a dead letter one more run, consuming no attempt.",
        _by_request(lambda k, app, occ, p: operations.requeue(k, occ, p.fence, p.error_code)),
        offered=lambda occ: occ["status"] == "dead_letter",
    ),
    WebAction(
        "adjudicate",
        "occurrence",
        Role.OPERATOR,
        AdjudicateRequest,
        "Decide an at-most-once occurrence whose outcome is unknown.",
        _by_request(lambda k, app, occ, p: operations.adjudicate(k, occ, p.decision.value)),
        offered=lambda occ: occ["status"] == "needs_adjudication",
    ),
    WebAction(
        "cancel",
        "occurrence",
        Role.OPERATOR,
        ActionRequest,
        "Cancel a waiting occurrence, or ask a running one to stop.",
        _by_request(lambda k, app, occ, p: operations.cancel(k, occ)),
        offered=lambda occ: occ["status"] in ACTIVE and not occ["cancel_requested"],
    ),
    _approval("approve", True, "Let an occurrence awaiting approval run (it is queued)."),
    _approval("reject", False, "Refuse an occurrence awaiting approval (it is skipped)."),
    WebAction(
        "run-now",
        "job",
        Role.OPERATOR,
        RunNowRequest,
        "Create an occurrence now (also for a disabled job); the schedule is not disturbed.",
        _by_request(lambda k, app, job, p: operations.run_now(k, job, p.force, p.params)),
    ),
    WebAction(
        "backfill",
        "job",
        Role.OPERATOR,
        BackfillRequest,
        "One occurrence per firing of the job's schedule in a range (`kernel jobs backfill`).",
        lambda k, app, job, p, user: _backfill(k, job, p, user),
    ),
    WebAction(
        "apply",
        "job",
        Role.ADMIN,
        ApplyRequest,
        "Create or revise a job definition (as `kernel jobs apply`).",
        lambda k, app, job, p, user: apply_specs(
            k,
            app,
            [web_spec(p.spec, job)],
            dry_run=p.dry_run,
            expected_revision=p.expected_revision,
            allow_kinds=p.allow_kinds,
            operator=user.name,
        ),
    ),
    WebAction(
        "enable",
        "job",
        Role.OPERATOR,
        Empty,
        "Enable a job; Beat plans it from now.",
        lambda k, app, job, p, user: operations.set_job_enabled(k, job, True, user.name),
        offered=lambda job: not job["enabled"],
    ),
    WebAction(
        "disable",
        "job",
        Role.OPERATOR,
        Empty,
        "Disable a job: no new firings; run-now still works.",
        lambda k, app, job, p, user: operations.set_job_enabled(k, job, False, user.name),
        offered=lambda job: bool(job["enabled"]),
    ),
    WebAction(
        "delete",
        "job",
        Role.ADMIN,
        Empty,
        "Delete a job definition (refused while it has unsettled occurrences).",
        lambda k, app, job, p, user: operations.delete_job(k, job, user.name),
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
    WebAction(
        "set-pool",
        "kernel",
        Role.ADMIN,
        PoolLimitRequest,
        "Define a resource pool or change its limit (as `kernel pools set`).",
        lambda k, app, _, p, user: operations.pools_set(k, p.name, p.limit),
    ),
)
