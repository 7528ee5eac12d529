"""What the benchmarks share: the test servers, a server to run on, a fresh database.

PostgreSQL and Redis come from ``tests/servers.py`` (as an unprivileged user when run
as root, on 127.0.0.1 and ephemeral ports) unless the caller names a running server.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Literal

__all__ = ["fresh_database", "server", "servers"]

_SERVERS_PATH = Path(__file__).resolve().parents[1] / "tests" / "servers.py"
_SERVERS_MODULE = "kernel_test_servers"


def servers() -> ModuleType:
    """tests/servers.py, imported by path once per process (tests/ is not a package)."""
    module = sys.modules.get(_SERVERS_MODULE)
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location(_SERVERS_MODULE, _SERVERS_PATH)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"{_SERVERS_PATH} not found")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[spec.name]  # a half-run module must not be handed out next time
        raise
    return module


@contextmanager
def server(kind: Literal["postgres", "redis"], url: str | None = None) -> Iterator[str]:
    """Yield ``url`` when given; else start a server of ``kind``, yield its URL, stop it."""
    if url:
        yield url
        return
    running = getattr(servers(), f"start_{kind}")()
    try:
        yield running.url
    finally:
        running.stop()


@contextmanager
def fresh_database(server_url: str | None, prefix: str) -> Iterator[str]:
    """A fresh, empty database URL, removed afterwards.

    A new database on the PostgreSQL server at ``server_url``; without one, a SQLite
    file in a temporary directory named with ``prefix``.
    """
    if server_url is None:
        with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
            yield f"sqlite:///{tmp}/kernel.db"
        return
    with servers().fresh_database(server_url) as url:
        yield url
