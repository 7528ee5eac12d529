"""A worker's warm shutdown reaches the pool processes it forked through shared memory.

Written before the change (session 24): there was no shared flag, every run's safe
point asked the file system for the marker file (``share_warm_shutdown`` did not exist).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from celery_app import warm_shutdown
from celery_app.warm_shutdown import (
    clear_warm_shutdown,
    request_warm_shutdown,
    share_warm_shutdown,
    shutdown_marker,
    shutting_down,
)


@pytest.fixture
def main_pid(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """This process as a worker's main process; its flag and marker gone afterwards."""
    monkeypatch.setattr(warm_shutdown, "_warm_shutdown", None)
    pid = os.getpid()
    yield pid
    clear_warm_shutdown(pid)


def test_a_forked_pool_process_reads_the_request_from_shared_memory(main_pid: int) -> None:
    share_warm_shutdown(main_pid)
    ready_read, ready_write = os.pipe()
    go_read, go_write = os.pipe()
    child = os.fork()
    if child == 0:  # a pool process, with no file system for the check
        try:
            os.path.exists = _no_file_system  # type: ignore[assignment]
            before = shutting_down(main_pid)
            os.write(ready_write, bytes([before]))
            os.read(go_read, 1)
            os.write(ready_write, bytes([shutting_down(main_pid)]))
        finally:
            os._exit(0)
    assert os.read(ready_read, 1) == b"\x00"
    request_warm_shutdown(main_pid)
    os.write(go_write, b"x")
    assert os.read(ready_read, 1) == b"\x01"
    os.waitpid(child, 0)
    assert shutdown_marker(main_pid).exists()  # still written, for whoever reads the file
    clear_warm_shutdown(main_pid)
    assert not shutting_down(main_pid)


def test_another_workers_marker_is_still_read_from_its_file(main_pid: int) -> None:
    share_warm_shutdown(main_pid)
    other = main_pid + 1_000_000  # no process: its marker is a file this test writes
    try:
        request_warm_shutdown(other)
        assert shutting_down(other)
        assert not shutting_down(main_pid)
    finally:
        clear_warm_shutdown(other)
    assert not shutting_down(other)


def _no_file_system(path: object) -> bool:
    raise AssertionError(f"a pool process sharing the flag asked the file system: {path}")
