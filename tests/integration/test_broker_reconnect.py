"""A worker whose RabbitMQ connection broke reconnects while the broker still holds the old one.

Behind a lossy link the worker gives up on its connection and opens a new one before
RabbitMQ has noticed the old one is gone (it keeps a connection until its socket closes
or heartbeats are missed). Everything the old connection declared exclusively is still
locked to it; with Celery's default exclusive control (pidbox) queue the worker's
redeclare fails with ``RESOURCE_LOCKED`` and the worker exits (seen three times in a
30-minute chaos run). :class:`HeldRelay` recreates that moment on one machine: a TCP relay
that drops the worker's side of every connection and keeps the broker's side open.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from integration.stack import Stack


class HeldRelay:
    """A TCP relay to one broker; :meth:`drop_workers_side` cuts every connection's
    client side and keeps its broker side open and silent."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.clients: list[socket.socket] = []
        self.held: list[socket.socket] = []
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
                self.clients.append(client)
                self.held.append(broker)
            threading.Thread(target=self._pipe, args=(client, broker), daemon=True).start()
            threading.Thread(target=self._pipe, args=(broker, client), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, target: socket.socket) -> None:
        # Never closes either socket: the broker's side stays open after a drop.
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                target.sendall(data)

    def drop_workers_side(self) -> None:
        with self.lock:
            clients, self.clients = self.clients, []
        for client in clients:
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_RDWR)
            client.close()

    def close(self) -> None:
        with self.lock:
            self.closed = True
        self.listener.close()
        self.drop_workers_side()
        for broker in self.held:
            broker.close()


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

    relay.drop_workers_side()
    stack.wait(
        lambda: worker.log().count("Connected to amqp://") >= 2,
        timeout=20,
        what="the worker's new connection",
    )
    # RabbitMQ still delivers some hints to the old connection's consumer (until it
    # drops that connection); Beat's pump hints again until one reaches the new one.
    after = stack.run_now("ping")
    stack.wait(lambda: stack.ledger(occurrence_id=after), timeout=20, what="a run after")
    assert "RESOURCE_LOCKED" not in worker.log()
