"""An HTTP server on 127.0.0.1 that answers the way real servers sometimes do.

Each path names its misbehaviour:

* ``/redirect/<status>?to=<url>``: that 3xx status with ``Location: <url>``;
* ``/interim/<1xx>``: an interim answer (``103 Early Hints``, ``102 Processing``), then 200;
* ``/charset/<name>``: 200 whose ``Content-Type`` names that charset;
* ``/short``: ``Content-Length: 1000``, 400 bytes, then the connection closes;
* ``/status/<n>``: that status; anything else: 200.

Every request is recorded with its method, path, headers and body, so a test counts the
requests each ``Idempotency-Key`` reached.
"""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from servers import serving

__all__ = ["Misbehaving", "Request", "misbehaving", "elsewhere", "over_tls"]

Request = dict[str, Any]


class Misbehaving(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.received: list[Request] = []
        self.scheme = "https" if tls else "http"
        if tls:
            self.socket = tls.wrap_socket(self.socket, server_side=True)

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server_address[1]}"

    def keyed(self, key: object) -> list[Request]:
        """The requests that carried ``Idempotency-Key: key``."""
        return [r for r in self.received if r["headers"].get("Idempotency-Key") == str(key)]


class _Handler(BaseHTTPRequestHandler):
    server: Misbehaving
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode()
        self.server.received.append(
            {"method": self.command, "path": self.path, "headers": self.headers, "body": body}
        )
        parts = urlsplit(self.path)
        head, _, last = parts.path.rpartition("/")
        if head == "/redirect":
            [target] = parse_qs(parts.query)["to"]
            self._send(int(last), b"moved", Location=target)
        elif head == "/interim":
            self.wfile.write(f"HTTP/1.1 {last} Interim\r\nLink: </style.css>\r\n\r\n".encode())
            self._send(200, b"final")
        elif head == "/charset":
            self._send(200, b"48656c6c6f", **{"Content-Type": f"text/plain; charset={last}"})
        elif parts.path == "/short":
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"x" * 400)
            self.close_connection = True
        elif head == "/status":
            self._send(int(last), f"said {last}".encode())
        else:
            self._send(200, f"ok: {parts.path}".encode())

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_GET

    def _send(self, status: int, body: bytes, **headers: str) -> None:
        self.send_response(status)
        headers.setdefault("Content-Type", "text/plain; charset=utf-8")
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def misbehaving(monkeypatch: pytest.MonkeyPatch) -> Iterator[Misbehaving]:
    """A :class:`Misbehaving` server, with any proxy of the host bypassed for loopback."""
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    with serving(Misbehaving()) as server:
        yield server


@pytest.fixture
def elsewhere() -> Iterator[Misbehaving]:
    """A second server: another origin (its own port) to redirect to."""
    with serving(Misbehaving()) as server:
        yield server


@pytest.fixture
def over_tls(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Misbehaving]:
    """A :class:`Misbehaving` server over TLS, its self-signed certificate trusted by the
    clients made while it serves (``SSL_CERT_FILE``)."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
        + ["-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    with serving(Misbehaving(context)) as server:
        yield server
