"""The JSON API under ``/api/``: the CLI's ``--json`` resources and operator actions.

Every route needs ``Authorization: Bearer TOKEN``: reads need the viewer role, each
action the role :data:`~celery_app.web.actions.ACTIONS` gives it, and the
authenticated user is recorded as the operator. The handlers are plain functions:
the server runs them in its thread pool, so a slow database never stalls the loop.
"""

from __future__ import annotations

import inspect
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Request
from fastapi.security import HTTPBearer
from pydantic import BaseModel

from celery_app import operations
from celery_app.web.actions import ACTIONS, Empty, WebAction
from celery_app.web.auth import refuse_unless
from celery_app.web.context import WebContext
from celery_app.web.users import Role, User
from kernel import EventCursor, EventType, InvalidArgument, OccurrenceStatus

__all__ = ["router"]


class ErrorDetail(BaseModel):
    code: str
    message: str
    details: dict[str, Any] | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text}
    for status, text in (
        (400, "The request body could not be parsed (not JSON)"),
        (401, "No valid bearer token"),
        (
            403,
            "The token's role may not do this (FORBIDDEN), or the database role the "
            "server connects as lacks the grant (PERMISSION_DENIED)",
        ),
        (404, "No such job or occurrence"),
        (409, "Refused by the kernel's current state (fence, revision, status)"),
        (413, "The request body is larger than the server accepts (kernel_web_max_body)"),
        (422, "Invalid parameters"),
        (429, "Too many failed sign-ins from this address or for this user: see Retry-After"),
        (503, "The database is unavailable"),
    )
}

_bearer = HTTPBearer(auto_error=False, description="A token from `kernel users add`.")
router = APIRouter(prefix="/api", responses=_ERRORS, dependencies=[Depends(_bearer)])

_BIG = 2**63 - 1
OccurrenceId = Annotated[int, Path(ge=1, le=_BIG)]
JobId = Annotated[str, Path(min_length=1, max_length=200)]


def _context(request: Request) -> WebContext:
    context: WebContext = request.app.state.context
    return context


Context = Annotated[WebContext, Depends(_context)]


def _authorized(needed: Role, what: str) -> Any:
    """A dependency answering the bearer token's user (authenticated by the
    :class:`~celery_app.web.door.Door` before anything else), refused unless their role
    covers ``needed``."""

    def user(request: Request) -> User:
        found: User = request.state.user
        refuse_unless(found, needed, what)
        return found

    return Depends(user)


Viewer = Annotated[User, _authorized(Role.VIEWER, "reading")]
#: Who may enqueue a task's run (any registered task, with any arguments).
ENQUEUE_ROLE = Role.OPERATOR


@router.get("/whoami", summary="The authenticated user and role")
def whoami(user: Viewer) -> dict[str, Any]:
    return {"user": user.name, "role": user.role.label}


@router.get("/status", summary="Counts per status, Beats and warnings (`kernel status`)")
def status(context: Context, _: Viewer) -> dict[str, Any]:
    return operations.status(context.kernel, context.celery)


@router.get("/jobs", summary="Job definitions and their health (`kernel jobs list`)")
def jobs(context: Context, _: Viewer) -> list[dict[str, Any]]:
    return [operations.job_data(*pair) for pair in operations.jobs_with_health(context.kernel)]


@router.get("/jobs/{job_id}", summary="One job, its spec and health (`kernel jobs show`)")
def job(job_id: JobId, context: Context, _: Viewer) -> dict[str, Any]:
    return operations.job_with_health(context.kernel, job_id)


@router.get("/jobs/{job_id}/preview", summary="The next firings (`kernel jobs preview`)")
def preview(
    job_id: JobId,
    context: Context,
    _: Viewer,
    next: Annotated[int, Query(ge=1, le=1000)] = 5,
    after: datetime | None = None,
) -> dict[str, Any]:
    return operations.preview(context.kernel, job_id, next, after and operations.utc(after))


@router.get("/jobs/{job_id}/why", summary="What became of the firing nearest a time (`kernel why`)")
def why(job_id: JobId, at: datetime, context: Context, _: Viewer) -> dict[str, Any]:
    return operations.why_answer(context.kernel, job_id, operations.utc(at))


#: What ``?status=`` takes: every status, and ``paused`` (paused at a checkpoint), as the CLI.
OccurrenceFilter = StrEnum(  # type: ignore[misc]
    "OccurrenceFilter", {**{s.name: s.value for s in OccurrenceStatus}, "PAUSED": "paused"}
)


@router.get("/occurrences", summary="Occurrences, newest first (`kernel occurrences list`)")
def occurrences(
    context: Context,
    _: Viewer,
    job: Annotated[str | None, Query(max_length=200)] = None,
    status: Annotated[list[OccurrenceFilter] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    before: Annotated[int | None, Query(ge=1, le=_BIG)] = None,
) -> list[dict[str, Any]]:
    found = context.kernel.list_occurrences(
        job_id=job,
        statuses=[s.value for s in status] if status else None,
        limit=limit,
        before_id=before,
    )
    return [occ.to_dict() for occ in found]


@router.get(
    "/occurrences/{occurrence_id}",
    summary="One occurrence with checkpoint, result and events (`kernel occurrences show`)",
)
def occurrence(occurrence_id: OccurrenceId, context: Context, _: Viewer) -> dict[str, Any]:
    return operations.occurrence_detail(context.kernel, occurrence_id)


@router.get("/events", summary="The event log, oldest first (`kernel events`)")
def events(
    context: Context,
    _: Viewer,
    job: Annotated[str | None, Query(max_length=200)] = None,
    occurrence: Annotated[int | None, Query(ge=1, le=_BIG)] = None,
    after: Annotated[int, Query(ge=0, le=_BIG)] = 0,
    before: Annotated[int | None, Query(ge=1, le=_BIG)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    type: Annotated[list[EventType] | None, Query(description="Only these types.")] = None,
    since: Annotated[datetime | None, Query(description="Only at or after this time.")] = None,
    cursor: Annotated[
        str | None,
        Query(
            max_length=EventCursor.MAX_TOKEN,
            description="Read on from a page's `cursor`, by commit (instead of `after`).",
        ),
    ] = None,
) -> dict[str, Any]:
    if cursor is not None and (after or before is not None):
        raise InvalidArgument("cursor", "reads on from a page: give it without after or before")
    return operations.events(
        context.kernel,
        after,
        job,
        occurrence,
        limit,
        before_id=before,
        types=type,
        since=since and operations.utc(since),
        cursor=None if cursor is None else EventCursor.parse(cursor),
    )


@router.get("/pools", summary="Resource pools: limit, running and waiting (`kernel pools list`)")
def pools(context: Context, _: Viewer) -> list[dict[str, Any]]:
    return operations.pools_list(context.kernel)


@router.get("/controls", summary="Running, pause-requested and paused occurrences")
def controls(
    context: Context, _: Viewer, limit: Annotated[int, Query(ge=1, le=200)] = 200
) -> list[dict[str, Any]]:
    return operations.runtime_controls(context.kernel, limit)


def _action_route(action: WebAction) -> None:
    """``POST /api/<target>/<id>/<action>`` (``POST /api/<action>`` for kernel-wide ones)."""
    model = action.params
    body = Body() if _required(model) else Body(default_factory=model)
    target_param, path = {
        "occurrence": ("occurrence_id", f"/occurrences/{{occurrence_id}}/{action.name}"),
        "job": ("job_id", f"/jobs/{{job_id}}/{action.name}"),
        "kernel": (None, f"/{action.name}"),
    }[action.target]

    def endpoint(context: WebContext, user: User, params: Empty, **target: Any) -> dict[str, Any]:
        subject = target[target_param] if target_param else None
        return action.run(context.kernel, context.celery, subject, params, user)

    # The signature FastAPI reads: built from objects, since this module's annotations
    # are strings that name nothing at module level.
    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters = [
        inspect.Parameter("context", keyword, annotation=Context),
        inspect.Parameter(
            "user", keyword, annotation=Annotated[User, _authorized(action.role, action.name)]
        ),
        inspect.Parameter("params", keyword, annotation=Annotated[model, body]),
    ]
    if target_param:
        kind = OccurrenceId if action.target == "occurrence" else JobId
        parameters.insert(0, inspect.Parameter(target_param, keyword, annotation=kind))
    endpoint.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        parameters, return_annotation=dict[str, Any]
    )
    router.add_api_route(
        path,
        endpoint,
        methods=["POST"],
        summary=f"{action.summary} (role: {action.role.label})",
        operation_id=f"{action.target}_{action.name.replace('-', '_')}",
    )


def _required(model: type[Empty]) -> bool:
    return any(field.is_required() for field in model.model_fields.values())


for _action in ACTIONS.values():
    _action_route(_action)


class EnqueueBody(BaseModel):
    """A task's run through the kernel (`kernel enqueue`); every field but task is optional."""

    task: str
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    key: str | None = None
    queue: str | None = None
    delivery: str = "at-least-once"
    countdown: float | None = None
    eta: datetime | None = None
    priority: int | None = None
    #: Seconds from now or an instant: not started by then, the run is skipped (expired).
    expires: float | datetime | None = None


@router.post(
    "/enqueue",
    summary="Enqueue a task's run: {occurrence, deduplicated} (`kernel enqueue`; role: operator)",
)
def enqueue(
    body: EnqueueBody,
    context: Context,
    _: Annotated[User, _authorized(ENQUEUE_ROLE, "enqueue")],
) -> dict[str, Any]:
    return operations.enqueue_task(context.kernel, context.celery, **body.model_dump())
