"""The work ``end_to_end.py`` drains, as a plain task on the product's app.

The same body (``bench/counter.py``: one Redis ``INCR``) runs as this task and as the
kernel's ``callable`` job, so the measured difference is the kernel's claim, settle
and runtime alone. Worker processes import this module through the bench's
``CELERY_CONFIG_MODULE`` (``imports``), which registers the task.
"""

from __future__ import annotations

from bench.counter import bump
from celery_app import app

__all__ = ["PLAIN_TASK", "noop"]

PLAIN_TASK = "bench.noop"


@app.task(name=PLAIN_TASK, ignore_result=True)
def noop(key: str, sleep_ms: float = 0) -> None:
    """The plain Celery baseline on the product's app: the body with no kernel around it."""
    bump(key, sleep_ms)
