"""A stock Celery app: Celery's defaults, nothing of the product's settings.

This is what a user runs today (``celery -A bench.stock_app worker -c 2``, with ``-E``
when Flower watches), the baseline ``end_to_end.py`` and ``peers.py`` divide by. The
broker comes from ``CELERY_BROKER_URL``, as Celery reads it by default. With
``BENCH_LEDGER`` set, ``celery -A bench.stock_app beat`` sends ``bench.stock_tick``
every second, for the two-Beats duplicate check.
"""

from __future__ import annotations

import os

from celery import Celery

from bench.counter import bump, record_now, stamp

__all__ = ["STAMP_TASK", "STOCK_TASK", "TICK_TASK", "app"]

STOCK_TASK = "bench.stock_noop"
STAMP_TASK = "bench.stock_stamp"
TICK_TASK = "bench.stock_tick"

app = Celery("bench_stock")

_ledger = os.environ.get("BENCH_LEDGER")
if _ledger:
    app.conf.beat_schedule = {"tick": {"task": TICK_TASK, "schedule": 1.0, "args": [_ledger]}}


@app.task(name=STOCK_TASK)
def stock_noop(key: str, sleep_ms: float = 0) -> None:
    bump(key, sleep_ms)


@app.task(name=STAMP_TASK)
def stock_stamp(key: str) -> None:
    stamp(key)


@app.task(name=TICK_TASK)
def stock_tick(ledger: str) -> None:
    record_now(ledger)
