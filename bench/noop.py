"""The work ``end_to_end.py`` drains: one Redis ``INCR``, as a plain task and as a callable job.

Both sides run the same body, so the measured difference is the kernel's claim,
settle and runtime alone. The counter is also how the plain side reports
completion without a result backend. Worker processes import this module through
the bench's ``CELERY_CONFIG_MODULE`` (``imports``), which registers the task.
"""

from __future__ import annotations

import functools
import os

import redis

from celery_app import app

__all__ = ["PLAIN_TASK", "bump", "noop"]

PLAIN_TASK = "bench.noop"


@functools.cache
def _client(pid: int) -> redis.Redis:
    """One connection per process (keyed by pid: a forked child must not share its parent's)."""
    return redis.Redis.from_url(os.environ["CELERY_BROKER_URL"])


def bump(key: str) -> None:
    """Count one run under ``key``: the callable job's whole body."""
    _client(os.getpid()).incr(key)


@app.task(name=PLAIN_TASK, ignore_result=True)
def noop(key: str) -> None:
    """The plain Celery baseline: the same body with no kernel around it."""
    bump(key)
