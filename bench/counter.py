"""The no-op body every benchmarked system runs, and the ledger the schedulers write.

The body is one Redis ``INCR`` on a key the run names; the counter is also how a run
learns that all its jobs ran, with no result backend. The ledger is a Redis list of
slot times (epoch seconds), one push per scheduled run, which ``peers.py`` counts for
duplicates and misses. Nothing here imports Celery or the product, so a stock Celery
worker or a peer's worker loads only what it needs.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

import redis

__all__ = ["bump", "client", "record_now", "record_run", "record_slot", "stamp"]


@functools.cache
def _client(pid: int) -> redis.Redis:
    return redis.Redis.from_url(os.environ["CELERY_BROKER_URL"])


def client() -> redis.Redis:
    """One connection per process (keyed by pid: a forked child must not share its parent's)."""
    return _client(os.getpid())


def bump(key: str, sleep_ms: float = 0) -> None:
    """Count one run under ``key``: the whole body, after ``sleep_ms`` of waiting when given
    (an I/O-bound body: the process sleeps as it would waiting for a reply)."""
    if sleep_ms:
        time.sleep(sleep_ms / 1000)
    client().incr(key)


def stamp(key: str) -> None:
    """Push when this body started (epoch seconds) onto the list ``key``: the latency probe."""
    client().rpush(key, repr(time.time()))


def record_slot(ledger: str, slot: float) -> None:
    """Append the scheduled time ``slot`` (epoch seconds) of one run to ``ledger``."""
    client().rpush(ledger, repr(slot))


def record_run(ledger: str, ctx: Any) -> None:
    """A kernel ``callable`` job's body: the occurrence's scheduled time into ``ledger``."""
    record_slot(ledger, ctx.occurrence.scheduled_for.timestamp())


def record_now(ledger: str) -> None:
    """For systems that don't tell a run its scheduled time: when the run started."""
    record_slot(ledger, time.time())
