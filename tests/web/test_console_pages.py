"""The console's pages over a real ``kernel web``: what an action needs before it is
offered, the footer, the events page, live updates, the run timeline, charts, the
definition's revisions, Swagger UI."""

from __future__ import annotations

import asyncio
import html
import json
import re
import socket
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack, ExitStack
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from web.support import Web, console_login, hidden_fields

from celery_app.web.event_log import MAX_STREAMS


@pytest.fixture(scope="module")
def operator(web: Web) -> Iterator[httpx.Client]:
    client = console_login(web.url, "operator", web.tokens["operator"])
    try:
        yield client
    finally:
        client.close()


def _running(web: Web, **fields: object) -> int:
    job = web.fresh_job(**fields)
    occ = web.kernel.run_now(job, request_id=f"{job}-r", operator="t").occurrence.id
    assert web.kernel.claim(occ, owner="w1", lease=600) is not None
    return occ


def test_pause_is_offered_only_when_the_adapter_can_pause(web: Web, operator: httpx.Client) -> None:
    shell = _running(web, kind="shell", payload={"argv": ["true"]})
    page = operator.get(f"/occurrences/{shell}").text
    assert f'href="/occurrences/{shell}/pause"' not in page
    assert 'id="no-pause"' in page and "declares no safe point" in page
    assert f'href="/occurrences/{shell}/cancel"' in page
    checkpointing = _running(web)  # callable: checkpoint_v1
    page = operator.get(f"/occurrences/{checkpointing}").text
    assert f'href="/occurrences/{checkpointing}/pause"' in page
    assert 'id="no-pause"' not in page


def test_a_running_occurrence_shows_its_progress(web: Web, operator: httpx.Client) -> None:
    """The checkpoint its lease keeper stored with the last renewal, while it runs."""
    occ = _running(web)
    web.kernel.renew(occ, owner="w1", fence=1, lease=600, checkpoint={"done": 12})
    page = operator.get(f"/occurrences/{occ}").text
    shown = re.search(r'<pre id="checkpoint">(.*?)</pre>', page, re.S)
    assert shown is not None and json.loads(html.unescape(shown.group(1))) == {"done": 12}


def test_the_footer_names_the_kernels_absolute_database(web: Web, operator: httpx.Client) -> None:
    page = operator.get("/jobs").text
    database = web.users_file.parent / "kernel.db"
    assert f'<code id="database">sqlite:///{database}</code>' in page
    assert Path(str(database)).is_absolute()
    assert 'id="database"' not in httpx.get(f"{web.url}/login").text


def _runs(web: Web, job: str, count: int) -> list[int]:
    return [
        web.kernel.run_now(job, request_id=f"{job}-{n}", operator="t", force=True).occurrence.id
        for n in range(count)
    ]


def _event_ids(page: str) -> list[int]:
    return [int(i) for i in re.findall(r"<tr><td>(\d+)</td><td><time", page)]


def test_the_events_page_shows_the_latest_first_filtered_and_pages_back(
    web: Web, operator: httpx.Client
) -> None:
    job = web.fresh_job()
    occurrences = _runs(web, job, 30)  # 61 events: defined, then run-now + created each
    first = operator.get("/events", params={"job": job})
    assert first.status_code == 200
    shown = _event_ids(first.text)
    assert len(shown) == 50 and shown == sorted(shown, reverse=True)
    assert shown[0] == web.kernel.events(job_id=job, before_id=2**62, limit=1)[0].id
    older = re.search(r'href="/events\?([^"]+)">Older', first.text)
    assert older, first.text
    rest = _event_ids(operator.get("/events?" + html.unescape(older.group(1))).text)
    assert len(rest) == 11 and max(rest) < min(shown)

    created = operator.get("/events", params={"job": job, "type": "occurrence_created"}).text
    assert len(_event_ids(created)) == 30 and "job_run_now</td>" not in created
    one = operator.get("/events", params={"occurrence": str(occurrences[3])}).text
    assert len(_event_ids(one)) == 2 and f'href="/occurrences/{occurrences[3]}"' in one
    later = operator.get("/events", params={"job": job, "since": "2999-01-01T00:00"}).text
    assert _event_ids(later) == [] and "No events match." in later
    earlier = operator.get("/events", params={"job": job, "since": "2000-01-01T00:00:00"}).text
    assert _event_ids(earlier) == shown
    bad = operator.get("/events", params={"type": "no_such_type"})
    assert bad.status_code == 422 and "no_such_type" in bad.text

    with web.api(web.tokens["viewer"]) as api:
        page = api.get("/api/events", params={"job": job, "type": "job_run_now", "limit": 5})
        assert page.status_code == 200, page.text
        assert {e["type"] for e in page.json()["events"]} == {"job_run_now"}
        assert page.json()["more"] is True
        on = api.get("/api/events", params={"job": job, "type": "job_run_now",
                                            "cursor": page.json()["cursor"]})  # fmt: skip
        assert on.status_code == 200 and on.json()["events"][0]["id"] > page.json()["last_id"]
        both = api.get("/api/events", params={"cursor": "1", "after": 1})
        assert both.status_code == 422 and "cursor" in both.text
        since = api.get("/api/events", params={"job": job, "since": "2999-01-01T00:00:00Z"})
        assert since.status_code == 200 and since.json()["events"] == []


def _next_message(lines: Iterator[str]) -> dict[str, str]:
    """The fields of the next server-sent message that carries an event."""
    message: dict[str, str] = {}
    for line in lines:
        if not line:
            if "event" in message:
                return message
            message = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(": ")
            message[name] = value
    raise AssertionError("the stream ended")


def test_the_live_stream_sends_new_events_of_its_filter(web: Web, operator: httpx.Client) -> None:
    job, other = web.fresh_job(), web.fresh_job()
    after = web.kernel.last_event_id()
    assert httpx.get(f"{web.url}/live").status_code == 303  # a session, like every page
    with operator.stream("GET", "/live", params={"job": job, "after": after}) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        _runs(web, other, 1)
        occ = _runs(web, job, 1)[0]
        message = _next_message(stream.iter_lines())
    sent = json.loads(message["data"])
    assert message["event"] == "events"
    assert sorted(e["type"] for e in sent) == ["job_run_now", "occurrence_created"]
    assert {e["job_id"] for e in sent} == {job} and occ in {e["occurrence_id"] for e in sent}
    assert int(message["id"]) == sent[-1]["id"]  # on SQLite the cursor is the last id
    refused = operator.get("/live", params={"after": "1@not-a-snapshot"})
    assert refused.status_code == 422 and "INVALID_ARGUMENT" in refused.text


def test_swagger_ui_is_served_from_the_server_itself(web: Web) -> None:
    page = httpx.get(f"{web.url}/docs")
    assert page.status_code == 200 and 'src="/static/swagger-ui-bundle.js"' in page.text
    assert "https://" not in page.text  # nothing from a CDN
    for name in ("swagger-ui-bundle.js", "swagger-ui.css", "swagger-ui-LICENSE", "docs.js"):
        assert httpx.get(f"{web.url}/static/{name}").status_code == 200, name


def test_timeline_and_charts_show_the_runs(web: Web, operator: httpx.Client) -> None:
    job = web.fresh_job()
    good, bad = _runs(web, job, 2)
    claim = web.kernel.claim(good, owner="w1", lease=600)
    assert claim is not None
    web.kernel.succeed(good, owner="w1", fence=claim.fence, result={"ok": 1})
    claim = web.kernel.claim(bad, owner="w2", lease=600)
    assert claim is not None
    web.kernel.fail(bad, owner="w2", fence=claim.fence, code="BOOM", message="it broke",
                    retryable=False)  # fmt: skip

    page = operator.get(f"/occurrences/{bad}").text
    timeline = page[page.index('id="timeline"') : page.index("</figure>")]
    story = web.kernel.events(occurrence_id=bad, limit=100)
    assert timeline.count("<circle") == len(story) and timeline.count('class="lease"') == 1
    assert "claimed by w2 (attempt 1)" in timeline and "dead letter: BOOM it broke" in timeline

    page = operator.get(f"/jobs/{job}").text
    history = page[page.index('id="history"') : page.index("</figure>")]
    assert f'<a href="/occurrences/{good}"><rect class="bar ok"' in history
    assert f'<a href="/occurrences/{bad}"><rect class="bar bad"' in history

    page = operator.get("/").text
    throughput = page[page.index('id="throughput"') : page.index("</figure>")]
    assert 'class="bar ok"' in throughput and 'class="bar bad"' in throughput


def test_the_job_page_shows_its_yaml_revisions_and_their_diff(
    web: Web, operator: httpx.Client
) -> None:
    job = web.fresh_job(payload={"callable": "os.path:join", "args": ["a"]})
    web.kernel.revise_job(
        {"id": job, "kind": "callable", "payload": {"callable": "os.path:join", "args": ["b"]},
         "schedule": {"every": "2h"}},
        expected_revision=1,
        operator="alice",
    )  # fmt: skip
    page = operator.get(f"/jobs/{job}").text
    definition = html.unescape(page[page.index('id="definition"') : page.index("</pre>")])
    assert f"id: {job}\nkind: callable\nenabled: true\nschedule:\n  every: 7200.0\n" in definition
    revisions = page[
        page.index('id="revisions"') : page.index("</table>", page.index('id="revisions"'))
    ]
    assert "alice" in revisions and revisions.count("<tr><td>") == 2
    diff = html.unescape(page[page.index('<pre class="diff"') : page.rindex("</pre>")])
    assert '<span class="del">-  every: 3600.0</span>' in diff
    assert '<span class="add">+  every: 7200.0</span>' in diff
    assert '<span class="add">+  - b</span>' in diff
    same = operator.get(f"/jobs/{job}", params={"old": 2, "new": 2}).text
    assert "Revisions 2 and 2 are the same." in same


def test_an_operator_disables_and_enables_a_job_from_its_page(
    web: Web, operator: httpx.Client
) -> None:
    job = web.fresh_job()
    for action, enabled in (("disable", False), ("enable", True)):
        page = operator.get(f"/jobs/{job}").text
        assert f'href="/jobs/{job}/{action}"' in page
        confirm = operator.get(f"/jobs/{job}/{action}")
        assert f"Confirm: {action}" in confirm.text
        done = operator.post(f"/jobs/{job}/{action}", data=hidden_fields(confirm.text))
        assert done.status_code == 200 and f"{action}: done" in done.text
        assert web.kernel.get_job(job).enabled is enabled
    events = [e.type for e in web.kernel.events(job_id=job, limit=10)]
    assert events[-2:] == ["job_disabled", "job_enabled"]


def test_live_streams_are_bounded_and_a_closed_one_frees_its_slot(
    web: Web, operator: httpx.Client
) -> None:
    with ExitStack() as streams:
        for _ in range(MAX_STREAMS):
            assert streams.enter_context(operator.stream("GET", "/live")).status_code == 200
        refused = operator.get("/live")
        assert refused.status_code == 503 and "TOO_MANY_STREAMS" in refused.text
    # The server notices the closed streams within a poll and takes a new one.
    deadline = time.monotonic() + 10
    while True:
        with operator.stream("GET", "/live") as again:
            if again.status_code == 200:
                break
        assert time.monotonic() < deadline, "closed streams kept their slots"
        time.sleep(0.2)


async def _burst(web: Web, cookies: httpx.Cookies, count: int) -> list[int]:
    """Open ``count`` live streams at once; their statuses, read while all are open."""
    limits = httpx.Limits(max_connections=count)
    async with httpx.AsyncClient(
        base_url=web.url, cookies=cookies, limits=limits, timeout=30
    ) as client, AsyncExitStack() as streams:  # fmt: skip
        opened = await asyncio.gather(
            *(streams.enter_async_context(client.stream("GET", "/live")) for _ in range(count))
        )
        return [s.status_code for s in opened]


def test_a_burst_of_live_streams_gets_no_more_than_the_cap(
    web: Web, operator: httpx.Client
) -> None:
    # Before the slot was taken in the route, 99 of a burst of 100 were let in.
    statuses = asyncio.run(_burst(web, operator.cookies, MAX_STREAMS + 36))
    assert sorted(set(statuses)) == [200, 503] and statuses.count(200) == MAX_STREAMS
    # Clients that leave before their stream starts give their slots back too.
    address = urlsplit(web.url)
    cookie = "; ".join(f"{k}={v}" for k, v in operator.cookies.items())
    request = f"GET /live HTTP/1.1\r\nHost: x\r\nCookie: {cookie}\r\n\r\n".encode()
    for _ in range(MAX_STREAMS + 36):
        with socket.create_connection((address.hostname, address.port)) as gone:
            gone.sendall(request)
    deadline = time.monotonic() + 20
    while (taken := asyncio.run(_burst(web, operator.cookies, MAX_STREAMS + 1))).count(
        200
    ) != MAX_STREAMS:
        assert time.monotonic() < deadline, f"slots kept: only {taken.count(200)} streams open"
        time.sleep(0.5)
