"""Fixtures for the console and HTTP API: a real ``kernel web`` server on 127.0.0.1.

``web`` (one per module) is a migrated SQLite kernel in its own directory, three
users made with the real ``kernel users add`` (viewer, operator, admin), and
``celery -A celery_app kernel web --port 0`` serving it; the test process opens the
same database to arrange state the way workers do. :func:`start_web` starts a server
for a test that brings its own processes (the browser test's worker and Beat).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from web.support import Web, make_users, start_web, stop

from kernel import Kernel
from kernel.testing import ManualClock


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    root = tmp_path_factory.mktemp("web")
    url = f"sqlite:///{root / 'kernel.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CELERY_", "KERNEL_"))}
    env.update(
        KERNEL_DATABASE_URL=url,
        KERNEL_USERS_FILE=str(root / "users.json"),
        KERNEL_VAR_DIR=str(root / "var"),
    )
    kernel = Kernel.open(url, migrate_schema=True)
    past = Kernel.open(url, clock=ManualClock(datetime(2026, 1, 2, tzinfo=UTC)))
    tokens = make_users(root / "users.json")
    proc, base = start_web("web", root, env)
    try:
        yield Web(base, kernel, past, tokens, root / "users.json", proc)
    finally:
        stop(proc)
        past.close()
        kernel.close()
