"""The console's occurrence pages: the filtered list, and one occurrence with its run
timeline, checkpoint, output and events, and the actions its adapter and the user's
role allow (what the adapter cannot do is said instead)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Query, Request, Response

from celery_app import operations
from celery_app.web import charts, console
from kernel import OccurrenceStatus

__all__ = ["router"]

router = APIRouter(include_in_schema=False)

_PAGE = 50


@router.get("/occurrences")
def occurrences(
    request: Request,
    context: console.Context,
    login: console.PageLogin,
    cursor: console.PageCursor,
    job: Annotated[str | None, Query(max_length=200)] = None,
    status: Annotated[list[str] | None, Query()] = None,
    before: Annotated[int | None, Query(ge=1, le=2**63 - 1)] = None,
) -> Response:
    wanted = [s for s in status or [] if s in OccurrenceStatus.__members__.values()]
    found = context.kernel.list_occurrences(
        job_id=job or None, statuses=wanted or None, limit=_PAGE, before_id=before
    )
    query = [("job", job)] if job else []
    query += [("status", s) for s in wanted]
    older = None
    if len(found) == _PAGE:
        older = "&".join(f"{k}={quote(v)}" for k, v in [*query, ("before", str(found[-1].id))])
    return console.render(
        request,
        "occurrences.html",
        login=login,
        found=[occ.to_dict() for occ in found],
        job=job or "",
        wanted=wanted,
        statuses=[s.value for s in OccurrenceStatus],
        older=older,
        stream=console.stream_url(cursor) if before is None else None,
    )


@router.get("/occurrences/{occurrence_id}")
def occurrence(
    occurrence_id: console.OccurrencePath,
    request: Request,
    context: console.Context,
    login: console.PageLogin,
    cursor: console.PageCursor,
) -> Response:
    detail = operations.occurrence_detail(context.kernel, occurrence_id)
    offered = [a for a in console.allowed_actions(login, "occurrence") if a.offered(detail)]
    # What the occurrence's adapter cannot do is said instead of offered.
    withheld = {}
    if any(a.name == "pause" for a in offered):
        occ = context.kernel.get_occurrence(occurrence_id)
        refused = operations.pause_refusal(context.celery, occ)
        if refused is not None:
            withheld["pause"] = refused
    story = operations.occurrence_story(context.kernel, occurrence_id)["story"]
    settled = detail["settled_at"] is not None
    return console.render(
        request,
        "occurrence.html",
        login=login,
        occ=detail,
        actions=[a for a in offered if a.name not in withheld],
        withheld=withheld,
        story=story,
        timeline=charts.timeline(story, context.kernel.now(), settled),
        stream=console.stream_url(cursor, [("occurrence", str(occurrence_id))]),
    )
