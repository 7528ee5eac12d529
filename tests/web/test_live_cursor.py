"""A page's live stream starts where the event log stood before the page read anything.

An event committed while a page is being read must still reach that page's stream: its
script refreshes the page only when an event arrives, so one skipped leaves the page
stale for good (CI saw the console show ``pause_requested`` for a run that had paused).
Each page here is the real app in process; the kernel read a page makes is wrapped so a
real operator's pause commits in the middle of it, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterator
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

import celery_app
from celery_app.web.app import create_app
from celery_app.web.auth import SESSION_COOKIE, Sessions, SignInLimiter
from celery_app.web.context import WebContext
from celery_app.web.event_log import LiveStreams, _stream
from celery_app.web.users import Role, UserStore
from celery_app.web_settings import WebSettings
from kernel import EventCursor, Kernel

_STREAM = re.compile(r'data-stream="([^"]+)"')
_SAFE_POINTS = ["adapter_checkpoint"]


@pytest.fixture
def kernel(kernel_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Kernel]:
    monkeypatch.setenv("KERNEL_DATABASE_URL", kernel_url)  # the settings the pages read
    opened = Kernel.open(kernel_url, migrate_schema=True)
    try:
        yield opened
    finally:
        opened.close()


Page = Callable[[str], httpx.Response]


@pytest.fixture
def console(kernel: Kernel, tmp_path: Path) -> Page:
    """GET a page of the console's app over ``kernel``, signed in as a viewer."""
    users = UserStore(tmp_path / "users.json")
    user, _ = users.add("viewer", Role.parse("viewer"))
    app = celery_app.app
    sessions = Sessions()
    context = WebContext(
        app, kernel, users, sessions, WebSettings.from_app(app, "127.0.0.1"), SignInLimiter(5)
    )
    transport = httpx.ASGITransport(create_app(context))
    cookies = {SESSION_COOKIE: sessions.start(user).id}

    async def get(path: str) -> httpx.Response:
        async with httpx.AsyncClient(
            transport=transport, base_url="http://console", cookies=cookies
        ) as client:
            return await client.get(path)

    return lambda path: asyncio.run(get(path))


def _running(kernel: Kernel) -> tuple[str, int]:
    kernel.define_job({"id": "j", "kind": "callable", "schedule": {"every": "1h"},
                       "payload": {"callable": "os.path:join", "args": ["a"]}})  # fmt: skip
    occ = kernel.run_now("j", request_id="r", operator="t").occurrence.id
    assert kernel.claim(occ, owner="w1", lease=600) is not None
    return "j", occ


def _first_batch(kernel: Kernel, stream_url: str) -> list[str]:
    """The types of the first events message the page's stream sends."""
    query = parse_qs(urlsplit(unescape(stream_url)).query)
    scope: dict[str, Any] = {"job_id": None, "occurrence_id": None, "types": None, "since": None}
    if "job" in query:
        scope["job_id"] = query["job"][0]
    if "occurrence" in query:
        scope["occurrence_id"] = int(query["occurrence"][0])

    async def first() -> list[str]:
        stream = _stream(kernel, LiveStreams(), EventCursor.parse(query["after"][0]), scope)
        try:
            while not (text := await anext(stream)).startswith("id: "):
                pass
        finally:
            await stream.aclose()
        return [e["type"] for e in json.loads(text.strip().split("\n")[2].removeprefix("data: "))]

    return asyncio.run(asyncio.wait_for(first(), timeout=30))


#: A page, and the kernel read during which the pause commits.
PAGES: dict[str, tuple[Callable[[str, int], str], str]] = {
    "overview": (lambda job, occ: "/", "status"),
    "occurrences": (lambda job, occ: "/occurrences", "list_occurrences"),
    "occurrence": (lambda job, occ: f"/occurrences/{occ}", "get_occurrence"),
    "job": (lambda job, occ: f"/jobs/{job}", "get_job"),
    "events": (lambda job, occ: "/events", "events"),
}


@pytest.mark.parametrize("page", PAGES)
def test_an_event_committed_while_a_page_is_read_reaches_its_stream(
    page: str, kernel: Kernel, console: Page, monkeypatch: pytest.MonkeyPatch
) -> None:
    job, occ = _running(kernel)
    path, read = PAGES[page]
    real = getattr(kernel, read)
    paused: list[str] = []

    def read_then_pause(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **kwargs)
        if not paused:  # the page has read; an operator's pause commits before it renders
            kernel.request_pause(occ, expected_fence=1, request_id="p",
                                 safe_points=_SAFE_POINTS, operator="ops")  # fmt: skip
            paused.append(read)
        return found

    monkeypatch.setattr(kernel, read, read_then_pause)
    shown = console(path(job, occ))
    monkeypatch.undo()
    assert shown.status_code == 200, shown.text
    assert paused == [read], f"{path(job, occ)} never called Kernel.{read}"
    stream = _STREAM.search(shown.text)
    assert stream is not None, "the page names no live stream"
    # A later event: the first message the stream sends carries it either way.
    kernel.ack_pause(occ, owner="w1", fence=1, request_id="p", expected_revision=None,
                     safe_point="adapter_checkpoint", checkpoint={"done": 1})  # fmt: skip
    sent = _first_batch(kernel, stream.group(1))
    assert "occurrence_pause_requested" in sent, f"the stream skipped it; it sent {sent}"
    assert "occurrence_paused" in sent
