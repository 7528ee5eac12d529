"""The warm-shutdown marker: how a worker's main process tells its pool processes to hand back."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

__all__ = ["shutdown_marker", "request_warm_shutdown", "clear_warm_shutdown"]


@functools.cache  # asked at every run's safe points
def shutdown_marker(main_pid: int) -> Path:
    """A file whose presence tells a worker's pool processes that a warm shutdown began.

    The worker's main process and its pool children share a host, so a file is
    the simplest signal that reaches every child whatever the pool type.
    """
    return Path(tempfile.gettempdir()) / "celery-kernel" / f"warm-shutdown-{main_pid}"


def request_warm_shutdown(main_pid: int) -> None:
    marker = shutdown_marker(main_pid)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()


def clear_warm_shutdown(main_pid: int) -> None:
    shutdown_marker(main_pid).unlink(missing_ok=True)
