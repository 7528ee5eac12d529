"""The console's action forms: a confirmation page (GET), then the action (POST).

The confirmation page mints the request id, so submitting the same form twice is
answered ``deduplicated``; the POST needs the session's CSRF token (see
:mod:`.console`) and the role the action needs, and shows the result. Applying a
definition takes one step more: its form (the definition as JSON, with the revision it
was read at) is first checked by a dry run, whose page confirms what would change; a
job that moved on meanwhile is then refused REVISION_CONFLICT, not overwritten.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from celery_app import operations
from celery_app.operations import format_json
from celery_app.web.actions import ACTIONS, ApplyRequest, WebAction
from celery_app.web.auth import Forbidden, Session
from celery_app.web.console import Context, FormLogin, JobPath, OccurrencePath, PageLogin, render
from celery_app.web.users import User
from kernel import InvalidArgument, NotFound

__all__ = ["router"]

router = APIRouter(include_in_schema=False)


def _action(name: str, target: str, user: User) -> WebAction:
    action = ACTIONS.get(name)
    if action is None or action.target != target:
        raise InvalidArgument("action", f"no {target} action {name!r}")
    if not user.may(action.role):
        raise Forbidden(
            f"{name} needs the {action.role.label} role; {user.name} is {user.role.label}"
        )
    return action


def _back(action: WebAction, target: Any) -> str:
    """The page an action was started from."""
    if action.target == "occurrence":
        return f"/occurrences/{target}"
    if action.target == "job":
        return "/jobs" if action.name == "delete" else f"/jobs/{quote(target, safe='')}"
    return "/"


def _subject(context: Context, action: WebAction, target: Any) -> dict[str, Any] | None:
    """What the action is about, as shown."""
    if action.target == "occurrence":
        return context.kernel.get_occurrence(target).to_dict()
    if action.target == "job":
        try:
            return operations.job_data(context.kernel.get_job(target))
        except NotFound:
            if action.name == "apply":  # a new job's definition
                return None
            raise
    return None


def _confirm(
    request: Request,
    context: Context,
    login: tuple[Session, User],
    action: WebAction,
    target: Any,
    **shown: Any,
) -> Response:
    subject = _subject(context, action, target)
    if action.name == "apply" and "spec_text" not in shown and subject:
        shown["spec_text"] = format_json(subject["spec"], indent=2)
    return render(
        request,
        "confirm.html",
        login=login,
        action=action,
        target=target,
        subject=subject,
        post_to=request.url.path,
        back=_back(action, target),
        request_id=operations.new_request_id(),
        **shown,
    )


async def _perform(
    request: Request, context: Context, login: tuple[Session, User], action: WebAction, target: Any
) -> Response:
    form = await request.form()
    fields = {
        name: value
        for name, value in form.items()
        if name in action.params.model_fields and isinstance(value, str) and value != ""
    }
    try:
        params = action.params.model_validate(fields)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise InvalidArgument("form", problems) from None
    result = await run_in_threadpool(
        action.run, context.kernel, context.celery, target, params, login[1]
    )
    if isinstance(params, ApplyRequest) and params.dry_run:
        # The check was the first step: confirm what it found, then apply.
        spec_text = format_json(params.spec, indent=2)
        return await run_in_threadpool(
            _confirm, request, context, login, action, target, checked=result, spec_text=spec_text
        )
    back = _back(action, target)
    occ = result.get("occurrence")
    if action.name == "run-now" and occ:
        back = f"/occurrences/{occ['id']}"
    return render(request, "result.html", login=login, action=action, result=result, back=back)


@router.get("/occurrences/{occurrence_id}/{name}")
def confirm_occurrence_action(
    occurrence_id: OccurrencePath, name: str, request: Request, context: Context, login: PageLogin
) -> Response:
    return _confirm(request, context, login, _action(name, "occurrence", login[1]), occurrence_id)


@router.post("/occurrences/{occurrence_id}/{name}")
async def occurrence_action(
    occurrence_id: OccurrencePath, name: str, request: Request, context: Context, login: FormLogin
) -> Response:
    action = _action(name, "occurrence", login[1])
    return await _perform(request, context, login, action, occurrence_id)


@router.get("/jobs/{job_id}/{name}")
def confirm_job_action(
    job_id: JobPath, name: str, request: Request, context: Context, login: PageLogin
) -> Response:
    return _confirm(request, context, login, _action(name, "job", login[1]), job_id)


@router.post("/jobs/{job_id}/{name}")
async def job_action(
    job_id: JobPath, name: str, request: Request, context: Context, login: FormLogin
) -> Response:
    return await _perform(request, context, login, _action(name, "job", login[1]), job_id)


@router.get("/kernel/{name}")
def confirm_kernel_action(
    name: str, request: Request, context: Context, login: PageLogin
) -> Response:
    return _confirm(request, context, login, _action(name, "kernel", login[1]), None)


@router.post("/kernel/{name}")
async def kernel_action(
    name: str, request: Request, context: Context, login: FormLogin
) -> Response:
    return await _perform(request, context, login, _action(name, "kernel", login[1]), None)
