"""A worker whose RabbitMQ connection broke reconnects while the broker still holds the old one.

Behind a lossy link a worker gives up on its connection and opens a new one before
RabbitMQ has noticed the old one is gone (it keeps a connection until its socket closes
or its heartbeats stop). Queues the old connection declared exclusively, the worker's
control (pidbox) queue among them, stay locked to it: the redeclare fails with
``RESOURCE_LOCKED``, and the worker used to exit (three workers in a 30-minute chaos
run). :class:`HeldRelay` recreates that moment on one machine.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from integration.stack import Stack

#: How long the broker keeps a dropped worker's connection in the test (RabbitMQ: until
#: heartbeats are missed, a minute or more with Celery's defaults).
BROKER_LETS_GO_AFTER_S = 3.0


class HeldRelay:
    """A TCP relay to one broker whose :meth:`drop_workers_side` cuts the client side of
    every connection at once and the broker's side only later."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed
                return
            with self.lock:
                if self.closed:
                    client.close()
                    return
                broker = socket.create_connection(self.upstream)
                self.pairs.append((client, broker))
            threading.Thread(target=self._pipe, args=(client, broker), daemon=True).start()
            threading.Thread(target=self._pipe, args=(broker, client), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, target: socket.socket) -> None:
        # Closes neither socket: the broker's side outlives the client's.
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                target.sendall(data)

    def drop_workers_side(self, broker_lets_go_after: float) -> None:
        with self.lock:
            pairs, self.pairs = self.pairs, []
        for client, _ in pairs:
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_RDWR)
            client.close()
        brokers = [broker for _, broker in pairs]
        threading.Timer(broker_lets_go_after, lambda: [b.close() for b in brokers]).start()

    def close(self) -> None:
        with self.lock:
            self.closed = True
        self.listener.close()
        self.drop_workers_side(0)


@pytest.fixture
def relay(rabbitmq_url: str) -> Iterator[HeldRelay]:
    parts = urlsplit(rabbitmq_url)
    made = HeldRelay((parts.hostname or "127.0.0.1", parts.port or 5672))
    try:
        yield made
    finally:
        made.close()


@pytest.mark.parametrize("stack", ["rabbitmq"], indirect=True)
def test_worker_survives_reconnecting_while_rabbitmq_holds_its_old_connection(
    relay: HeldRelay, stack: Stack, rabbitmq_url: str
) -> None:
    parts = urlsplit(rabbitmq_url)
    via_relay = parts._replace(netloc=f"{parts.username}:{parts.password}@127.0.0.1:{relay.port}")
    stack.env["CELERY_BROKER_URL"] = via_relay.geturl()
    stack.use_jobs(stack.job("ping", "record"))
    worker = stack.start_worker("reconnecting")
    stack.start_beat("beat")
    before = stack.run_now("ping")
    stack.wait(lambda: stack.ledger(occurrence_id=before), timeout=20, what="a run before")

    relay.drop_workers_side(BROKER_LETS_GO_AFTER_S)
    stack.wait(lambda: "RESOURCE_LOCKED" in worker.log(), timeout=20, what="the locked queue")
    after = stack.run_now("ping")
    stack.wait(lambda: stack.ledger(occurrence_id=after), timeout=20, what="a run after")
