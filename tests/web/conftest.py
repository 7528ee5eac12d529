"""Fixtures for the console and HTTP API: a real ``kernel web`` server on 127.0.0.1.

``web`` (one per module) is a migrated SQLite kernel in its own directory, three
users made with the real ``kernel users add`` (viewer, operator, admin), and
``celery -A celery_app kernel web --port 0`` serving it; the test process opens the
same database to arrange state the way workers do. :func:`~web.support.serve` starts
another such server with settings of its own; :func:`~web.support.start_web` starts a
server for a test that brings its own processes (the browser test's worker and Beat).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from web.support import Web, serve


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    with serve(tmp_path_factory.mktemp("web")) as served:
        yield served
