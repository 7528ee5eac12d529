"""Jobs and tasks of the job-health tests: a run that fails, and a notification hook.

Worker processes import this module (``imports`` in the stack's settings): the hook
task appends each notification it gets, one JSON line, to ``$HEALTH_HOOK_LEDGER``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from celery import shared_task

from adapters.base import ExecutionContext

__all__ = ["boom", "hook"]


def boom(ledger: str, ctx: ExecutionContext) -> None:
    """Fail every time."""
    raise RuntimeError(f"boom in occurrence {ctx.occurrence.id}")


@shared_task(name="health.hook")
def hook(notification: dict[str, Any]) -> None:
    """Record one notification."""
    data = (json.dumps(notification, sort_keys=True) + "\n").encode()
    fd = os.open(os.environ["HEALTH_HOOK_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
