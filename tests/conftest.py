"""Suite-wide fixtures: real PostgreSQL, Redis and RabbitMQ servers, started once per session.

``KERNEL_TEST_POSTGRES_URL`` / ``KERNEL_TEST_REDIS_URL`` / ``KERNEL_TEST_RABBITMQ_URL``
point the suite at servers
someone else runs. Without them the servers are started here on first use. A server
that cannot start skips the tests that need it on a workstation, and fails them when
``CI=true``: CI installs both, so a missing server there is a broken build, not a skip.
"""

from __future__ import annotations

import compileall
import contextlib
import os
import re
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

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
from sqlalchemy.engine import make_url

from kernel import Kernel


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


ROOT = Path(__file__).resolve().parents[1]
#: What the processes tests spawn (celery workers, Beat, CLIs) import from this tree.
_SPAWN_IMPORTS = ("kernel", "celery_app", "beat_schedule", "adapters", "tests")
_TEST_MODULE = re.compile(r"/test_[^/]*\.py$")


def pytest_configure(config: pytest.Config) -> None:
    """Compile the tree's bytecode once, in the controller, before any worker starts.

    With ``PYTHONDONTWRITEBYTECODE`` set (this machine, some CI images) every process a
    test spawns would compile the project again, ~0.1-0.2 CPU-s each. compileall writes
    ``__pycache__`` (git-ignored) regardless of that variable; xdist workers and spawned
    processes only read it, and a stale file is ignored by its source's mtime. Test
    modules are left out: pytest rewrites and caches those itself.
    """
    if hasattr(config, "workerinput"):
        return
    for name in _SPAWN_IMPORTS:
        compileall.compile_dir(ROOT / name, quiet=1, rx=_TEST_MODULE)


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


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated to the head revision, once per session, to copy."""
    path = tmp_path_factory.mktemp("migrated") / "kernel.db"
    Kernel.open(f"sqlite:///{path}", migrate_schema=True).close()
    with contextlib.closing(sqlite3.connect(path)) as conn:  # the WAL into the file
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


@pytest.fixture(scope="session")
def migrated_postgres(postgres_url: str) -> Iterator[str]:
    """The name of a PostgreSQL database migrated to the head revision, once per session,
    that ``CREATE DATABASE ... TEMPLATE`` copies (nothing stays connected to it)."""
    with fresh_database(postgres_url) as url:
        Kernel.open(url, migrate_schema=True).close()
        yield str(make_url(url).database)


@pytest.fixture
def pg_migrated_database_url(postgres_url: str, migrated_postgres: str) -> Iterator[str]:
    """:func:`pg_database_url`, migrated (a copy of the session's migrated database)."""
    with fresh_database(postgres_url, template=migrated_postgres) as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def kernel_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """URL of a database of the test's own: a SQLite file in ``tmp_path``, or a fresh
    PostgreSQL one. Empty; migrated when the test also uses a ``kernel`` fixture, which
    opens it migrated anyway: a copy of the session's migrated database costs a few ms
    where migrating costs ~150 (most of the kernel suite's set-up)."""
    migrated = "kernel" in request.fixturenames
    if request.param == "sqlite":
        path = tmp_path / "kernel.db"
        if migrated:
            shutil.copy2(request.getfixturevalue("migrated_sqlite"), path)  # its 0600 too
        return f"sqlite:///{path}"
    url: str = request.getfixturevalue(
        "pg_migrated_database_url" if migrated else "pg_database_url"
    )
    return url
