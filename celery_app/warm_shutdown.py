"""The warm-shutdown request a worker's main process makes and its pool processes read
at every run's safe points (a run there hands its occurrence back)."""

from __future__ import annotations

import functools
import mmap
import os
import tempfile
from pathlib import Path

__all__ = [
    "clear_warm_shutdown",
    "request_warm_shutdown",
    "share_warm_shutdown",
    "shutdown_marker",
    "shutting_down",
]


@functools.cache  # asked at every run's safe points
def shutdown_marker(main_pid: int) -> Path:
    """A file whose presence tells a worker's pool processes that a warm shutdown began.

    The worker's main process and its pool children share a host, so a file reaches
    every child whatever the pool type; a pool its main process forked after
    :func:`share_warm_shutdown` reads the same request from shared memory instead.
    """
    return Path(tempfile.gettempdir()) / "celery-kernel" / f"warm-shutdown-{main_pid}"


@functools.cache
def _marker_path(main_pid: int) -> str:
    return str(shutdown_marker(main_pid))


class _SharedFlag:
    """One byte of memory a worker's main process maps before it forks its pool: every
    pool process it forks (and any thread pool in it) reads the same byte."""

    def __init__(self, main_pid: int) -> None:
        self.main_pid = main_pid
        self.page = mmap.mmap(-1, 1)  # anonymous and shared: a fork keeps it shared


#: The warm-shutdown flag of this process's worker, when its main process shared one.
_warm_shutdown: _SharedFlag | None = None


def share_warm_shutdown(main_pid: int) -> None:
    """In a worker's main process, before it forks its pool: its warm shutdown is also
    told through a byte of shared memory, which its pool processes read at every run's
    safe points instead of asking the file system (a ``stat`` a run, 1 µs alone and about
    8 µs of a run's CPU in place: bench/README.md, session 24). A process forked from another
    worker's main process maps its own when it becomes a worker's main process."""
    global _warm_shutdown
    _warm_shutdown = _SharedFlag(main_pid)


def _shared(main_pid: int) -> _SharedFlag | None:
    """``main_pid``'s shared byte, when this process has it."""
    flag = _warm_shutdown
    return flag if flag is not None and flag.main_pid == main_pid else None


def shutting_down(main_pid: int) -> bool:
    """Whether ``main_pid``'s worker began a warm shutdown: its shared byte when this
    process has it, else whether its marker file exists (``os.path`` on the path's text,
    half of ``Path.exists``'s cost)."""
    if flag := _shared(main_pid):
        return flag.page[0] != 0
    return os.path.exists(_marker_path(main_pid))


def request_warm_shutdown(main_pid: int) -> None:
    if flag := _shared(main_pid):
        flag.page[0] = 1
    marker = shutdown_marker(main_pid)  # for any process that does not share the byte
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()


def clear_warm_shutdown(main_pid: int) -> None:
    if flag := _shared(main_pid):
        flag.page[0] = 0
    shutdown_marker(main_pid).unlink(missing_ok=True)
