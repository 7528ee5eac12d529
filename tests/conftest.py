"""Suite-wide fixtures: real PostgreSQL, Redis and RabbitMQ servers, started once per session.

``KERNEL_TEST_POSTGRES_URL`` / ``KERNEL_TEST_REDIS_URL`` / ``KERNEL_TEST_RABBITMQ_URL``
point the suite at servers
someone else runs. Without them the servers are started here on first use. A server
that cannot start skips the tests that need it on a workstation, and fails them when
``CI=true``: CI installs both, so a missing server there is a broken build, not a skip.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest
from servers import (
    RunningServer,
    ServerUnavailable,
    fresh_database,
    start_postgres,
    start_rabbitmq,
    start_redis,
    unavailable,
)


def _server_url(env_var: str, start: Callable[[], RunningServer]) -> Iterator[str]:
    """Yield the URL from ``env_var``, else start a server and stop it afterwards."""
    configured = os.environ.get(env_var)
    if configured:
        yield configured
        return
    try:
        server = start()
    except ServerUnavailable as exc:
        unavailable(f"{start.__name__}: {exc}")
    try:
        yield server.url
    finally:
        server.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``long`` first. xdist hands files to its workers in this order
    (``--no-loadscope-reorder``; by default it puts files with few tests last), and a
    long file handed out last leaves the other CI worker idle until it ends."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """SQLAlchemy URL (``postgresql+psycopg://...``) of the session's PostgreSQL database.

    Shared by every test: create what you need in a fresh schema or use
    ``pg_database_url`` for an empty database of your own.
    """
    yield from _server_url("KERNEL_TEST_POSTGRES_URL", start_postgres)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """``redis://127.0.0.1:PORT/0`` of the session's Redis server (shared; not flushed)."""
    yield from _server_url("KERNEL_TEST_REDIS_URL", start_redis)


@pytest.fixture(scope="session")
def rabbitmq_url() -> Iterator[str]:
    """``amqp://guest:guest@127.0.0.1:PORT//`` of the session's RabbitMQ node (shared)."""
    yield from _server_url("KERNEL_TEST_RABBITMQ_URL", start_rabbitmq)


@pytest.fixture
def pg_database_url(postgres_url: str) -> Iterator[str]:
    """SQLAlchemy URL of a new, empty PostgreSQL database, dropped after the test."""
    with fresh_database(postgres_url) as url:
        yield url
