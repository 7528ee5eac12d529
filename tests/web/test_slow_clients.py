"""Slow clients against a real ``kernel web`` on 127.0.0.1 (issue 41): a connection that
sends its headers a byte at a time, or its body slower than the server waits for, is
closed; it cannot hold a slot of the server for as long as it likes.

Before the read deadlines, 300 such connections all stayed open as long as each kept
sending a byte now and then (uvicorn's ``timeout_keep_alive`` covers only the quiet
time between requests).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from web.support import Web, serve

#: The client gives up after this long: far past the deadlines the server is given.
_PATIENCE_S = 60.0


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    root: Path = tmp_path_factory.mktemp("slow")
    with serve(root, KERNEL_WEB_HEADER_TIMEOUT="2", KERNEL_WEB_BODY_TIMEOUT="3") as served:
        yield served


async def _dribble(host: str, port: int, head: bytes, tail: bytes) -> bytes:
    """Send ``head`` at once, then ``tail`` a byte every 0.2 s (over and over), until the
    server closes the connection; what it answered."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(head)
    answer = b""

    async def read_until_closed() -> None:
        nonlocal answer
        while chunk := await reader.read(4096):
            answer += chunk

    reading = asyncio.ensure_future(read_until_closed())
    try:
        sent = 0
        while not reading.done():
            if sent < len(tail):
                writer.write(tail[sent : sent + 1])
                sent += 1
            try:
                await writer.drain()
            except ConnectionError:
                break
            await asyncio.wait([reading], timeout=0.2)
        await reading
    except ConnectionError:
        pass
    finally:
        reading.cancel()
        writer.close()
        with suppress(ConnectionError):
            await writer.wait_closed()
    return answer


def _all_closed(web: Web, count: int, head: bytes, tail: bytes) -> list[bytes]:
    """Open ``count`` dribbling connections at once; each one's answer once it is closed
    (the test fails if any is still open after ``_PATIENCE_S``)."""
    address = urlsplit(web.url)
    host, port = address.hostname, address.port
    assert host and port

    async def every() -> list[bytes]:
        return await asyncio.wait_for(
            asyncio.gather(*(_dribble(host, port, head, tail) for _ in range(count))),
            _PATIENCE_S,
        )

    try:
        return asyncio.run(every())
    except TimeoutError:
        raise AssertionError(f"slow connections still open after {_PATIENCE_S} s") from None


def test_headers_sent_a_byte_at_a_time_are_cut_off(strict: Web) -> None:
    # A header line that never ends: each connection keeps sending for a minute.
    tail = b"X-Slow: " + b"a" * 400
    answers = _all_closed(strict, 300, b"GET /login HTTP/1.1\r\nHost: x\r\n", tail)
    assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers), {a[:40] for a in answers}
    with strict.api() as client:
        assert client.get("/openapi.json").status_code == 200


def test_a_connection_that_sends_nothing_is_cut_off(strict: Web) -> None:
    answers = _all_closed(strict, 50, b"", b"")
    assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers), {a[:40] for a in answers}


@pytest.mark.parametrize("path", ["/login", "/api/jobs"])
def test_a_body_slower_than_the_server_waits_is_cut_off(strict: Web, path: str) -> None:
    # /login reads the body; /api/jobs answers 401 first and would read the rest after.
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded"
        "\r\nContent-Length: 1000\r\n\r\n"
    ).encode()
    answers = _all_closed(strict, 100, head, b"n" * 1000)
    assert len(answers) == 100
    with strict.api() as client:
        assert client.get("/openapi.json").status_code == 200
