"""The http adapter against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from servers import serving
from unit.adapter_support import make_context, make_occurrence

from adapters.base import AdapterError, AdjudicationContext, Cancelled, ErrorClass
from adapters.http import HttpAdapter
from kernel.errors import InvalidArgument
from kernel.reports import Verdict
from kernel.states import Decision, Effect


class Recorder(ThreadingHTTPServer):
    """Records every request; ``release`` ends the deliberately slow answer."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.received: list[dict[str, Any]] = []
        self.release = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: Recorder

    def do_GET(self) -> None:
        self._answer()

    do_POST = do_PUT = do_GET

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode()
        self.server.received.append(
            {"method": self.command, "path": self.path, "headers": self.headers, "body": body}
        )
        path = self.path.partition("?")[0]
        if path.startswith("/status/"):
            status = int(path.rsplit("/", 1)[1])
            self._send(status, f"upstream said no ({status})".encode())
        elif path == "/slow":
            self.server.release.wait(10)
            self._send(200, b"late")
        elif path == "/big":
            self._send(200, b"a" * 100_000)
        elif path == "/hang-up":  # the request was read; the connection closes unanswered
            self.close_connection = True
        elif path == "/stall":  # the status comes, then the body stalls
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b"partial")
            self.server.release.wait(10)
            self.close_connection = True
        else:
            self._send(200, f"ok: {self.path}".encode())

    def _send(self, status: int, body: bytes) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the client gave up (the timeout test); nothing to answer

    def log_message(self, format: str, *args: Any) -> None:
        """Keep the test output quiet."""


@pytest.fixture(scope="module")
def running_server() -> Iterator[Recorder]:
    with serving(Recorder()) as server:
        yield server
        server.release.set()


@pytest.fixture
def server(running_server: Recorder, monkeypatch: pytest.MonkeyPatch) -> Recorder:
    monkeypatch.setenv(
        "no_proxy", "127.0.0.1"
    )  # a proxy configured for the host must not interfere
    running_server.received.clear()
    return running_server


def run(payload: dict[str, Any], **context: Any) -> Any:
    return HttpAdapter().execute(make_context("http", payload, **context))


def classify(payload: dict[str, Any], **context: Any) -> ErrorClass:
    adapter = HttpAdapter()
    with pytest.raises((AdapterError, Cancelled)) as caught:
        adapter.execute(make_context("http", payload, **context))
    return adapter.classify_error(caught.value)


def test_sends_json_with_the_occurrence_as_idempotency_key(server: Recorder) -> None:
    result = run(
        {
            "method": "post",
            "url": f"{server.url}/hooks/report",
            "headers": {"X-Team": "data", "Idempotency-Key": "chosen-by-the-job"},
            "json": {"day": "2026-11-29", "rows": [1, 2]},
        }
    )

    assert result == {"status": 200, "body": "ok: /hooks/report", "truncated": False}
    [request] = server.received
    headers = request["headers"]
    assert request["method"] == "POST"
    assert json.loads(request["body"]) == {"day": "2026-11-29", "rows": [1, 2]}
    assert headers["Idempotency-Key"] == "7"
    assert headers["X-Kernel-Job"] == "nightly"
    assert headers["X-Kernel-Trigger"] == "cron:2026-11-29T12:00:00Z"
    assert headers["X-Kernel-Attempt"] == "1"
    assert headers["Content-Type"] == "application/json"
    assert headers["X-Team"] == "data"


def test_sends_a_text_body_with_the_given_method(server: Recorder) -> None:
    run({"method": "PUT", "url": f"{server.url}/state", "body": "übernommen"})

    [request] = server.received
    assert (request["method"], request["body"]) == ("PUT", "übernommen")


def test_a_get_without_body(server: Recorder) -> None:
    assert run({"url": f"{server.url}/ping?x=1"})["body"] == "ok: /ping?x=1"
    assert server.received[0]["method"] == "GET"


@pytest.mark.parametrize(
    ("status", "retryable", "code"),
    [
        (500, True, "HTTP_5XX"),
        (502, True, "HTTP_5XX"),
        (504, True, "HTTP_5XX"),
        (503, True, "HTTP_5XX"),
        (429, True, "HTTP_429"),
        (400, False, "HTTP_4XX"),
        (404, False, "HTTP_4XX"),
    ],
)
def test_status_classification(server: Recorder, status: int, retryable: bool, code: str) -> None:
    error = classify({"url": f"{server.url}/status/{status}"})

    # The server answered: whatever it said, the effect is never known not applied.
    assert (error.retryable, error.code, error.effect) == (retryable, code, Effect.UNKNOWN)
    assert f"answered {status}" in error.message
    assert f"upstream said no ({status})" in error.message


def test_error_messages_leave_out_query_and_credentials(server: Recorder) -> None:
    answered = classify({"url": f"{server.url}/status/500?token=hunter2"})
    unreachable = classify({"url": server.url.replace("//", "//user:hunter2@") + "/x?k=hunter2"})

    assert "answered 500" in answered.message and "/status/500" in answered.message
    assert "hunter2" not in answered.message
    assert unreachable.code == "HTTP_CONNECTION"
    assert "hunter2" not in unreachable.message


def test_a_slow_server_times_out_retryably(server: Recorder) -> None:
    started = time.monotonic()

    error = classify({"url": f"{server.url}/slow"}, timeout_s=0.3)

    # Sent, then no answer: the server may have applied it.
    assert (error.retryable, error.code, error.effect) == (True, "TIMEOUT", Effect.UNKNOWN)
    assert "waiting for the answer" in error.message
    assert time.monotonic() - started < 3


def test_a_connection_lost_after_sending_leaves_the_effect_unknown(server: Recorder) -> None:
    error = classify({"url": f"{server.url}/hang-up", "json": {"amount": 5}})

    assert (error.retryable, error.code, error.effect) == (True, "HTTP_CONNECTION", Effect.UNKNOWN)
    assert "after the request was sent" in error.message
    assert [r["path"] for r in server.received] == ["/hang-up"]


def test_a_body_stalled_after_the_status_was_applied(server: Recorder) -> None:
    error = classify({"url": f"{server.url}/stall"}, timeout_s=0.3)

    assert (error.code, error.effect) == ("HTTP_BODY", Effect.APPLIED)
    assert "answered 200" in error.message


def test_a_refused_connection_is_retryable() -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    error = classify({"url": f"http://127.0.0.1:{port}/"})

    # Nothing was sent: known not applied, so even at-most-once retries it.
    assert (error.retryable, error.code, error.effect) == (
        True,
        "HTTP_CONNECTION",
        Effect.NOT_APPLIED,
    )


def test_the_body_is_bounded(server: Recorder) -> None:
    result = run({"url": f"{server.url}/big"})

    assert result["truncated"] is True
    assert result["body"] == "a" * 65536


def test_a_cancelled_occurrence_sends_nothing(server: Recorder) -> None:
    cancelled = threading.Event()
    cancelled.set()

    error = classify({"url": f"{server.url}/hooks"}, cancelled=cancelled)

    assert error.code == "CANCELLED"
    assert server.received == []


@pytest.mark.parametrize(
    "payload",
    [
        {},
        {"url": "file:///etc/passwd"},
        {"url": "ftp://example.org/file"},
        {"url": "http://127.0.0.1/", "headers": {"X-N": 1}},
        {"url": "http://127.0.0.1/", "body": {"not": "text"}},
    ],
)
def test_an_unusable_payload_is_refused_when_the_job_is_defined(payload: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument) as caught:
        make_context("http", payload)
    assert caught.value.field.startswith("payload")


def test_a_body_without_a_method_is_posted(server: Recorder) -> None:
    run({"url": f"{server.url}/hook", "json": {"a": 1}})

    assert server.received[0]["method"] == "POST"


def test_secret_headers_are_sent_from_the_worker_and_never_stored(
    server: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOOK_TOKEN", "Bearer canary-9f2c")
    payload = {"url": f"{server.url}/hook", "secret_headers": {"Authorization": "HOOK_TOKEN"}}
    ctx = make_context("http", payload)

    HttpAdapter().execute(ctx)

    assert server.received[0]["headers"]["Authorization"] == "Bearer canary-9f2c"
    assert "canary-9f2c" not in json.dumps(ctx.occurrence.definition)
    assert "Bearer canary-9f2c" in ctx.secrets  # the runtime masks it in output and errors


def ask(payload: dict[str, Any]) -> Verdict | None:
    occurrence = make_occurrence("http", payload)
    ctx = AdjudicationContext(occurrence, logging.getLogger("test"), 2.0, set())
    return HttpAdapter().adjudicate(ctx)


@pytest.mark.parametrize(
    ("status", "decision"),
    [(200, Decision.APPLIED), (404, Decision.NOT_APPLIED), (503, None), (409, None)],
)
def test_the_lookup_asks_by_idempotency_key(
    server: Recorder, status: int, decision: Decision | None
) -> None:
    payload = {
        "url": f"{server.url}/charge",
        "json": {"amount": 5},
        "headers": {"X-Team": "data"},
        "lookup": {"url": f"{server.url}/status/{status}?token=hidden"},
    }
    verdict = ask(payload)
    assert (verdict.decision if verdict else None) == decision
    if verdict is not None:
        assert verdict.evidence == {"lookup": f"GET {server.url}/status/{status}", "status": status}
    [request] = server.received
    assert (request["method"], request["body"]) == ("GET", "")
    assert request["headers"]["Idempotency-Key"] == "7"
    assert request["headers"]["X-Team"] == "data"


def test_the_lookup_maps_the_statuses_it_is_given(server: Recorder) -> None:
    lookup = {"url": f"{server.url}/status/410", "method": "post", "not_applied": [410]}
    verdict = ask({"url": f"{server.url}/charge", "lookup": lookup})
    assert verdict is not None and verdict.decision == Decision.NOT_APPLIED
    assert server.received[0]["method"] == "POST"


def test_without_a_lookup_or_an_answer_it_cannot_tell(server: Recorder) -> None:
    assert ask({"url": f"{server.url}/charge"}) is None
    assert server.received == []
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    assert (
        ask({"url": f"{server.url}/charge", "lookup": {"url": f"http://127.0.0.1:{port}/"}}) is None
    )


def test_a_status_cannot_mean_both() -> None:
    lookup = {"url": "http://127.0.0.1/s", "applied": [200], "not_applied": [200]}
    with pytest.raises(InvalidArgument) as refused:
        make_occurrence("http", {"url": "http://127.0.0.1/a", "lookup": lookup})
    assert refused.value.field == "payload.lookup.not_applied"
