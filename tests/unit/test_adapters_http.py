"""The http adapter against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from unit.adapter_support import make_context

from adapters.base import AdapterError, Cancelled, ErrorClass
from adapters.http import HttpAdapter
from kernel.errors import InvalidArgument


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
    server = Recorder()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()
    thread.join()


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
        (503, True, "HTTP_5XX"),
        (429, True, "HTTP_429"),
        (400, False, "HTTP_4XX"),
        (404, False, "HTTP_4XX"),
    ],
)
def test_status_classification(server: Recorder, status: int, retryable: bool, code: str) -> None:
    error = classify({"url": f"{server.url}/status/{status}"})

    assert (error.retryable, error.code) == (retryable, code)
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

    assert (error.retryable, error.code) == (True, "TIMEOUT")
    assert time.monotonic() - started < 3


def test_a_refused_connection_is_retryable() -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    error = classify({"url": f"http://127.0.0.1:{port}/"})

    assert (error.retryable, error.code) == (True, "HTTP_CONNECTION")


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
