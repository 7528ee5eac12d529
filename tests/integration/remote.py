"""The remote side of an http job: an HTTP server on 127.0.0.1 in the test process.

``POST /charge`` is answered 200 once ``release`` is set, or after ``answer_after``
seconds; ``GET /lookup/<status>`` answers that status at once. Every request is recorded
with its ``Idempotency-Key``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from servers import serving

__all__ = ["Remote", "remote"]


class Remote(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, answer_after: float = 60.0) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[tuple[str, str, str | None]] = []
        self.release = threading.Event()
        self.answer_after = answer_after

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def seen(self, method: str, prefix: str) -> list[str | None]:
        """Idempotency-Keys of the requests seen so far with ``method`` and path ``prefix``."""
        return [key for m, path, key in self.requests if m == method and path.startswith(prefix)]


class _Handler(BaseHTTPRequestHandler):
    server: Remote

    def do_POST(self) -> None:
        self._record()
        self.server.release.wait(self.server.answer_after)
        self._send(200)

    def do_GET(self) -> None:
        self._record()
        self._send(int(self.path.rsplit("/", 1)[1]))

    def _record(self) -> None:
        self.server.requests.append((self.command, self.path, self.headers["Idempotency-Key"]))

    def _send(self, status: int) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()
        except OSError:
            pass  # the client is gone (it timed out, or was stopped)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def remote() -> Iterator[Remote]:
    """A :class:`Remote` that holds a charge until the test ends (``release``)."""
    with serving(Remote()) as server:
        yield server
        server.release.set()
