"""Secrets are masked before anything is cut (issue 41): a secret lying across a cut
leaves no piece of itself in what is stored.

Each cut on the way from a run to the database, with a secret placed across it: the
2,000 characters of a failure's message, the 500 bytes of an error body that go into it,
the 64 KiB of a result body. The run goes the way a worker takes it (``run_occurrence``
on a real SQLite kernel) against a local server that echoes the job's secret header.
Before, each cut came first and the masking then missed the piece left in front of it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from servers import serving

from adapters.http import BODY_LIMIT, HttpAdapter
from celery_app.held_run import LeaseKeeper
from celery_app.runtime import run_occurrence
from kernel import Kernel

SECRET = "canary-7d1e4b90a2c35f68e1d2"
#: A piece of the secret long enough to give it away.
_PIECE = 6


class Echo(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    """``/STATUS/BEFORE/...``: answers STATUS with BEFORE bytes of filler, then the
    request's Authorization header (the job's secret), then more filler."""

    server: Echo

    def do_GET(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        _, status, before, *_ = self.path.split("/")
        body = b"f" * int(before) + self.headers["Authorization"].encode() + b"g" * 1000
        self.send_response(int(status))
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture(scope="module")
def echo() -> Iterator[Echo]:
    with serving(Echo()) as server:
        yield server


@pytest.fixture
def kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Kernel]:
    monkeypatch.setenv("ECHO_TOKEN", SECRET)
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    opened = Kernel.open(f"sqlite:///{tmp_path / 'kernel.db'}", migrate_schema=True)
    try:
        yield opened
    finally:
        opened.close()


def _run(kernel: Kernel, url: str) -> dict[str, Any]:
    """One run of an http job posting to ``url`` with the secret header; the stored row."""
    kernel.define_job(
        {
            "id": "echo",
            "kind": "http",
            "payload": {"url": url, "secret_headers": {"Authorization": "ECHO_TOKEN"}},
            "schedule": {"every": "1h"},
            "max_attempts": 1,
        }
    )
    occ = kernel.run_now("echo", request_id="r1", operator="t").occurrence.id
    run_occurrence(kernel, {"http": HttpAdapter()}, occ, main_pid=0, keeper=LeaseKeeper())
    stored = kernel.get_occurrence(occ)
    return {**stored.to_dict(), "result": stored.result}


def _pieces_left(stored: dict[str, Any]) -> list[str]:
    text = json.dumps(stored)
    return [
        SECRET[i : i + _PIECE]
        for i in range(len(SECRET) - _PIECE + 1)
        if SECRET[i : i + _PIECE] in text
    ]


@pytest.mark.parametrize("into", [_PIECE, 13, 20, len(SECRET) - 1])
def test_a_result_body_cut_at_64_kib_keeps_no_piece(kernel: Kernel, echo: Echo, into: int) -> None:
    stored = _run(kernel, f"{echo.url}/200/{BODY_LIMIT - into}/")
    assert stored["result"]["truncated"] is True and stored["status"] == "succeeded"
    assert _pieces_left(stored) == []


@pytest.mark.parametrize("into", [_PIECE, 13, 20, len(SECRET) - 1])
def test_an_error_body_cut_at_500_bytes_keeps_no_piece(
    kernel: Kernel, echo: Echo, into: int
) -> None:
    stored = _run(kernel, f"{echo.url}/400/{500 - into}/")
    assert stored["last_error"]["code"] == "HTTP_4XX"
    assert _pieces_left(stored) == []


@pytest.mark.parametrize("into", [_PIECE, 13, 20, len(SECRET) - 1])
def test_a_message_cut_at_2000_characters_keeps_no_piece(
    kernel: Kernel, echo: Echo, into: int
) -> None:
    # A long path puts the echoed secret (at the start of the body) across the cut.
    head = f"POST {echo.url}/400/0/"
    filler = 2000 - 3 - len(head) - len(" answered 400 Bad Request: ") - into
    stored = _run(kernel, f"{echo.url}/400/0/{'p' * filler}")
    message = stored["last_error"]["message"]
    assert len(message) <= 2000 and message.endswith("...")
    assert _pieces_left(stored) == []
