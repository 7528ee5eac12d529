"""The event log in the console: the events page, and the live stream that updates pages.

The events page shows the latest events first, filtered by job, occurrence, type and
time, and pages back towards older ones. ``/live`` is a server-sent event stream fed
from the same log: the server follows it by commit (``kernel.follow_events``, so a
transaction that commits after a later id is still sent), one read a second per
stream, and sends each new batch with the cursor past it as the message id; the
console's script refreshes the page when one arrives. A stream needs a session like
every page, lasts at most :data:`STREAM_S` (the browser reconnects, resuming from
``Last-Event-ID``), at most :data:`MAX_STREAMS` are open at once, and all end within a
poll when the server is asked to stop, so they never hold its shutdown open.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive, Scope, Send

from celery_app import operations
from celery_app.web.console import Context, PageCursor, PageLogin, render, stream_url
from kernel import Event, EventCursor, EventType, InvalidArgument, Kernel, KernelError

__all__ = ["MAX_STREAMS", "STREAM_S", "LiveStreams", "router"]

router = APIRouter(include_in_schema=False)

_PAGE = 50
_BIG = 2**63 - 1
#: How often a stream reads the log, and how long it stays open before the browser
#: reconnects (bounding what a forgotten tab costs).
POLL_S = 1.0
STREAM_S = 300.0
#: Streams open at once, server-wide; one more is refused 503.
MAX_STREAMS = 64
_KEEPALIVE_S = 15.0
_BATCH = 200


class TooManyStreams(KernelError):
    """Every live stream slot is taken (HTTP 503): the page still works, reload it later."""

    code = "TOO_MANY_STREAMS"


class LiveStreams:
    """The server's open live streams: a bounded count, and the signal that ends them."""

    def __init__(self, limit: int = MAX_STREAMS) -> None:
        self.limit = limit
        self.open = 0
        self.stopping = threading.Event()

    def take(self) -> _Slot:
        """A slot for one stream, taken now (the check and the count in one step, with no
        ``await`` between them: a burst of requests cannot all pass the check).

        Raises:
            TooManyStreams: every slot is taken.
        """
        if self.open >= self.limit:
            raise TooManyStreams(f"{self.limit} live streams are open; reload the page later")
        self.open += 1
        return _Slot(self)

    def stop(self) -> None:
        self.stopping.set()


class _Slot:
    """One taken stream slot; giving it back twice counts once."""

    def __init__(self, streams: LiveStreams) -> None:
        self._streams: LiveStreams | None = streams

    def give_back(self) -> None:
        if self._streams is not None:
            self._streams.open -= 1
            self._streams = None


class _LiveResponse(StreamingResponse):
    """The stream's response: it gives its slot back when it ends, however it ends — a
    client gone before the stream's first byte never runs the stream at all."""

    def __init__(self, slot: _Slot, content: AsyncIterator[str]) -> None:
        super().__init__(
            content, media_type="text/event-stream", headers={"X-Accel-Buffering": "no"}
        )
        self.slot = slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.slot.give_back()


@dataclass(frozen=True, slots=True)
class Filters:
    """The filters of a page or stream: for the kernel (``scope``), and as they were
    asked (``shown``, what the form shows; ``query``, the links that keep them)."""

    scope: dict[str, Any]
    shown: dict[str, str]
    query: list[tuple[str, str]]


_Text = Annotated[str | None, Query(max_length=200)]


def _filters(
    job: _Text = None,
    occurrence: _Text = None,
    type: Annotated[list[str] | None, Query(max_length=64)] = None,
    since: _Text = None,
) -> Filters:
    """The filters from the query (a form leaves its empty fields empty)."""
    scope: dict[str, Any] = {"job_id": job or None, "occurrence_id": None, "since": None}
    if occurrence:
        if not occurrence.isdigit() or not 1 <= int(occurrence) <= _BIG:
            raise InvalidArgument("occurrence", f"{occurrence!r}: expected an occurrence id")
        scope["occurrence_id"] = int(occurrence)
    wanted = [t for t in type or [] if t]
    unknown = sorted(set(wanted) - {t.value for t in EventType})
    if unknown:
        raise InvalidArgument("type", f"unknown event types {unknown}")
    scope["types"] = wanted or None
    if since:
        try:
            scope["since"] = operations.utc(datetime.fromisoformat(since))
        except ValueError:
            expected = f"{since!r}: expected a time like 2026-12-03T16:00"
            raise InvalidArgument("since", expected) from None
    shown = {"job": job or "", "occurrence": occurrence or "", "since": since or ""}
    query = [(k, v) for k, v in shown.items() if v] + [("type", t) for t in wanted]
    return Filters(scope, shown, query)


EventFilters = Annotated[Filters, Depends(_filters)]


@router.get("/events")
def events_page(
    request: Request,
    context: Context,
    login: PageLogin,
    cursor: PageCursor,
    filters: EventFilters,
    before: Annotated[int | None, Query(ge=1, le=_BIG)] = None,
) -> Response:
    scope = filters.scope
    page = operations.events(
        context.kernel, 0, scope["job_id"], scope["occurrence_id"], _PAGE,
        before_id=before or _BIG, types=scope["types"], since=scope["since"],
    )  # fmt: skip
    query = filters.query
    older = urlencode([*query, ("before", page["first_id"])]) if page["more"] else None
    latest = before is None
    return render(
        request,
        "events.html",
        login=login,
        found=page["events"][::-1],
        shown=filters.shown,
        wanted=scope["types"] or [],
        types=sorted(t.value for t in EventType),
        older=older,
        newest=urlencode(query) if not latest else None,
        stream=stream_url(cursor, query) if latest else None,
    )


@router.get("/live")
async def live(
    request: Request,
    context: Context,
    login: PageLogin,
    filters: EventFilters,
    after: Annotated[str, Query(max_length=EventCursor.MAX_TOKEN)] = "0",
) -> Response:
    cursor = EventCursor.parse(after)
    # A reconnecting browser names the last message it got; one we cannot read restarts
    # from the page's own cursor rather than failing the stream.
    with contextlib.suppress(InvalidArgument):
        cursor = EventCursor.parse(request.headers.get("last-event-id", ""))
    streams: LiveStreams = request.app.state.live
    return _LiveResponse(streams.take(), _stream(context.kernel, streams, cursor, filters.scope))


async def _stream(
    kernel: Kernel, streams: LiveStreams, cursor: EventCursor, scope: dict[str, Any]
) -> AsyncIterator[str]:
    """``retry``, then one ``events`` message per batch of new events (its ``id`` the
    cursor past them), a comment now and then, until the stream's time is up or the server
    stops. A client that goes ends it at once: the response is cancelled then."""
    yield "retry: 2000\n\n"
    ends = time.monotonic() + STREAM_S
    quiet_since = time.monotonic()
    while not streams.stopping.is_set() and time.monotonic() < ends:
        found: list[Event]
        found, cursor = await run_in_threadpool(
            functools.partial(kernel.follow_events, cursor, limit=_BATCH, **scope)
        )
        if found:
            data = json.dumps(_summaries(found))
            yield f"id: {cursor.token}\nevent: events\ndata: {data}\n\n"
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= _KEEPALIVE_S:
            yield ": still here\n\n"
            quiet_since = time.monotonic()
        await asyncio.sleep(POLL_S)


def _summaries(found: list[Event]) -> list[dict[str, Any]]:
    """What a page needs to know of new events (not their data)."""
    return [
        {"id": e.id, "type": e.type, "job_id": e.job_id, "occurrence_id": e.occurrence_id,
         "at": operations.iso(e.at)}
        for e in found
    ]  # fmt: skip
