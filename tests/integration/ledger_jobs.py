"""Job functions the integration tests schedule; each execution appends to a ledger file.

Worker processes import this module (``ledger_jobs:<function>``) from the
``PYTHONPATH`` the fixtures give them. A ledger line is one JSON object written
with a single ``O_APPEND`` write, so lines from concurrent processes never
interleave; it names the occurrence's trigger key and fence, which is what the
tests count to prove "exactly once", "both fences" or "each step once".
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import time
from typing import Any

from adapters.base import ExecutionContext

__all__ = ["append", "checks_then_stalls", "pool_process", "record", "steps", "stubborn"]


def append(ledger: str, ctx: ExecutionContext, event: str, **extra: Any) -> None:
    """Append one line about ``ctx``'s occurrence to ``ledger``."""
    occurrence = ctx.occurrence
    line = {
        "event": event,
        "job_id": occurrence.job_id,
        "occurrence_id": occurrence.id,
        "trigger_key": occurrence.trigger_key,
        "fence": occurrence.fence,
        "attempt": occurrence.attempt,
        "pid": os.getpid(),
        **extra,
    }
    data = (json.dumps(line, sort_keys=True) + "\n").encode()
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def record(ledger: str, ctx: ExecutionContext, sleep: float = 0.0) -> dict[str, Any]:
    """The effect first, then ``sleep`` seconds: a run killed while sleeping has had its effect."""
    append(ledger, ctx, "run")
    time.sleep(sleep)
    return {"trigger_key": ctx.occurrence.trigger_key, "fence": ctx.occurrence.fence}


def stubborn(ledger: str, ctx: ExecutionContext, sleep: float = 0.0) -> dict[str, Any]:
    """The effect first, then ``sleep`` seconds that nothing interrupts: every exception
    (Celery's soft time limit included) is swallowed, as careless job code would."""
    append(ledger, ctx, "run")
    deadline = time.monotonic() + sleep
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # the point: code that ignores being asked to stop
            time.sleep(0.05)
    return {"trigger_key": ctx.occurrence.trigger_key, "fence": ctx.occurrence.fence}


def checks_then_stalls(ledger: str, ctx: ExecutionContext, stall_s: int) -> dict[str, Any]:
    """A careful job's gap between its check and its effect, stretched: ``ctx.cancelled`` is
    checked, then ``stall_s`` seconds pass in C code holding the GIL (so no other thread of
    the process runs: not the lease keeper either), then the effect is written."""
    append(ledger, ctx, "run")
    if not ctx.cancelled.is_set():
        ctypes.PyDLL(None).sleep(stall_s)  # PyDLL: the call keeps the GIL
        append(ledger, ctx, "after_stall")
    return {"fence": ctx.occurrence.fence}


def steps(
    ledger: str, ctx: ExecutionContext, total: int, step_s: float, hold: str | None = None
) -> dict[str, Any]:
    """``total`` steps of ``step_s`` seconds a checkpoint after each; resumes after the last.

    With ``hold`` (a path), the last step waits while that file exists, checkpointing as it
    waits: a test that acts on the run while it runs, however slow the machine, says when
    it may end.
    """
    start = int(ctx.resumed["done"]) if ctx.resumed else 0
    for step in range(start, total):
        time.sleep(step_s)
        while step == total - 1 and hold is not None and os.path.exists(hold):
            ctx.checkpoint({"done": step})
            time.sleep(step_s)
        append(ledger, ctx, "step", step=step)
        ctx.checkpoint({"done": step + 1})
    return {"done": total, "resumed_from": start, "fence": ctx.occurrence.fence}


def pool_process(ledger: str, ctx: ExecutionContext) -> dict[str, Any]:
    """This pool process and its parent, and whether the pump's statement, which no
    worker runs, is rendered here: only the main process's rendering before the fork
    can have done it."""
    from kernel.statements.beat import HINT

    rendered = any(statement._rendered for statement in HINT.values())
    return {"pid": os.getpid(), "parent": os.getppid(), "hint_rendered": rendered}
