"""The console's job pages: the list of jobs, and one job with its latest runs (a chart
and a table), its next firings, its definition as YAML with its revisions and the
difference between two of them, and the actions the user's role allows."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import RedirectResponse

from celery_app import operations
from celery_app.web import charts
from celery_app.web.actions import ACTIONS
from celery_app.web.console import (
    Context,
    JobPath,
    PageCursor,
    PageLogin,
    allowed_actions,
    render,
    stream_url,
)
from kernel import Job, Kernel

__all__ = ["router"]

router = APIRouter(include_in_schema=False)

_JOB_PREVIEW = 3
_JOB_LATEST = 10
#: Runs in the job's history chart.
_JOB_HISTORY = 40


@router.get("/jobs")
def jobs(request: Request, context: Context, login: PageLogin) -> Response:
    kernel = context.kernel
    allowed = allowed_actions(login, "job")
    rows = []
    for job in kernel.list_jobs():
        latest = kernel.list_occurrences(job_id=job.id, limit=1)
        shown = operations.job_data(job)
        rows.append(
            {
                "job": job,
                "last": latest[0] if latest else None,
                "upcoming": _upcoming(kernel, job),
                "actions": [a for a in allowed if a.offered(shown)],
            }
        )
    return render(
        request,
        "jobs.html",
        login=login,
        rows=rows,
        actions=allowed,
        may_define=login[1].may(ACTIONS["apply"].role),
    )


Revision = Annotated[int | None, Query(ge=1, le=2**63 - 1)]


@router.get("/jobs/{job_id}")
def job_page(
    job_id: JobPath,
    request: Request,
    context: Context,
    login: PageLogin,
    cursor: PageCursor,
    old: Revision = None,
    new: Revision = None,
) -> Response:
    """The job; with ``old`` and ``new`` (revisions), also how its definition changed."""
    kernel = context.kernel
    found = kernel.get_job(job_id)
    revisions = operations.job_revisions(kernel, job_id)
    old = old or max(found.revision - 1, 1)
    new = new or found.revision
    latest = [o.to_dict() for o in kernel.list_occurrences(job_id=job_id, limit=_JOB_LATEST)]
    shown = operations.job_data(found)
    return render(
        request,
        "job.html",
        login=login,
        job=shown,
        upcoming=_upcoming(kernel, found),
        latest=latest,
        definition=operations.spec_yaml(shown["spec"]),
        revisions=revisions,
        old=old,
        new=new,
        diff=operations.revision_diff(revisions, old, new),
        history=charts.run_history(operations.job_runs(kernel, job_id, _JOB_HISTORY)),
        actions=[a for a in allowed_actions(login, "job") if a.offered(shown)],
        stream=stream_url(cursor, [("job", job_id)]),
    )


@router.get("/define")
def define(login: PageLogin, id: Annotated[str, Query(min_length=1, max_length=200)]) -> Response:
    """The jobs page's "new job" form: on to the definition form of that id."""
    return RedirectResponse(f"/jobs/{quote(id, safe='')}/apply", status_code=303)


def _upcoming(kernel: Kernel, job: Job) -> list[dict[str, Any]]:
    """The job's next few firings; none while it is disabled or has no schedule."""
    if not (job.enabled and job.spec["schedule"]):
        return []
    firings: list[dict[str, Any]] = operations.preview(kernel, job.id, _JOB_PREVIEW, None)[
        "firings"
    ]
    return firings
