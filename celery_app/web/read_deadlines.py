"""Deadlines for reading a request: its headers, then its body (uvicorn has neither).

uvicorn's ``timeout_keep_alive`` only closes a connection quiet between requests; one
that sends its headers a byte at a time, or its body a byte now and then, is held open
for as long as it keeps sending. :class:`ReadDeadlines` is uvicorn's h11 protocol with
two clocks: a request's headers must have arrived ``header_timeout`` seconds after the
connection opened or its first byte came in, and its body ``body_timeout`` seconds after
its headers — whether or not the application reads it (an answer given before the body
was read, a 401 say, still leaves the server reading the rest). A client past a deadline
is answered 408 if nothing was answered yet, and the connection closed.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["ReadDeadlines"]

log = logging.getLogger(__name__)

_TIMED_OUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s"
)


class ReadDeadlines(H11Protocol):
    """uvicorn's h11 protocol, closing a connection that sends a request too slowly."""

    def __init__(self, *args: Any, header_timeout: float, body_timeout: float, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self._deadline: asyncio.TimerHandle | None = None
        self._phase: str | None = None  # what the running clock waits for: headers, body

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm("headers")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._phase is None and self._between_requests():
            self._arm("headers")  # the first byte of the next request starts its clock
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may start a pipelined request
        self._follow()

    def _follow(self) -> None:
        """Move the clock on to what the connection now waits for."""
        reading_body = self.conn.their_state is h11.SEND_BODY
        if self._between_requests():
            if self._phase == "body" and not reading_body:
                # The rest of an answered request's body is in (uvicorn's keep-alive clock
                # was stopped by its bytes): the next request is on the header clock.
                self._arm("headers")
        elif reading_body:
            if self._phase != "body":
                self._arm("body")
        else:
            self._disarm()  # the request is in whole: answering it takes what it takes

    def _between_requests(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm(self, phase: str) -> None:
        self._disarm()
        self._phase = phase
        seconds = self.header_timeout if phase == "headers" else self.body_timeout
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self._phase = None

    def _expired(self) -> None:
        phase = self._phase
        self._deadline = self._phase = None
        if self.transport.is_closing():
            return
        seconds = self.header_timeout if phase == "headers" else self.body_timeout
        log.info(
            "closing the connection from %s: its request's %s took over %g s",
            self.client, phase, seconds,
            extra={"action": "web_read_timeout", "phase": phase},
        )  # fmt: skip
        if phase == "headers":  # nothing was answered yet
            said = f"the request's headers took over {seconds:g} s\n".encode()
            self.transport.write(_TIMED_OUT % (len(said), said))
        self.transport.close()
