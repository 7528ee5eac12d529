"""The chaos workload's job bodies; each appends to an external ledger the kernel never sees.

A ledger line is one JSON object written with one ``O_APPEND`` write to a file every
host shares, so the file's order is the real order of the writes, across hosts. Lines
name the occurrence, its attempt and fence, the host (``CHAOS_HOST`` of the worker's
environment) and the host's own wall clock (skewed on a skewed host; the checker
corrects it by the host's known offset). A careful job checks ``ctx.cancelled`` before
each effect: the runtime sets it when the lease is lost.

Run as a script it is the ``shell`` job: its lines name the occurrence, fence and
attempt from the ``KERNEL_*`` variables the shell adapter gives every child; the
harness looks up each occurrence's due time (the child is not told it), so the checker
judges shell runs like callable ones.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the shell job runs this file with no project on its path
    from adapters.base import ExecutionContext

__all__ = ["append", "long_steps", "shell_run", "tick"]


def append(ledger: str, event: str, **fields: Any) -> None:
    line = {"event": event, "host": os.environ.get("CHAOS_HOST"), "t": time.time(), **fields}
    data = (json.dumps(line, sort_keys=True) + "\n").encode()
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _append_run(ledger: str, ctx: ExecutionContext, event: str, **extra: Any) -> bool:
    """Append a line about this run unless the run was cancelled (lease lost); says which."""
    if ctx.cancelled.is_set():
        return False
    occurrence = ctx.occurrence
    append(
        ledger,
        event,
        job_id=occurrence.job_id,
        occurrence_id=occurrence.id,
        scheduled_for=occurrence.scheduled_for.timestamp(),
        attempt=occurrence.attempt,
        fence=occurrence.fence,
        pid=os.getpid(),
        **extra,
    )
    return True


def tick(ledger: str, ctx: ExecutionContext, work_s: float = 0.3) -> str:
    """The effect (``start``), ``work_s`` seconds of work, then ``end``."""
    if _append_run(ledger, ctx, "start"):
        time.sleep(work_s)
        _append_run(ledger, ctx, "end")
    return "done"


def long_steps(ledger: str, ctx: ExecutionContext, total: int, step_s: float) -> dict[str, int]:
    """``total`` steps with a checkpoint (a safe point) after each; resumes after the last done."""
    start = int(ctx.resumed["done"]) if ctx.resumed else 0
    if not _append_run(ledger, ctx, "start", resumed_from=start):
        return {"done": start}
    for step in range(start, total):
        time.sleep(step_s)
        if not _append_run(ledger, ctx, "step", step=step):
            return {"done": step}
        ctx.checkpoint({"done": step + 1})
    _append_run(ledger, ctx, "end")
    return {"done": total}


def shell_run(ledger: str) -> None:
    """The shell job's body: ``start``, 0.2 s of work, ``end``."""
    run = {
        "job_id": os.environ["KERNEL_JOB_ID"],
        "occurrence_id": int(os.environ["KERNEL_OCCURRENCE_ID"]),
        "attempt": int(os.environ["KERNEL_ATTEMPT"]),
        "fence": int(os.environ["KERNEL_FENCE"]),
        "pid": os.getpid(),
    }
    append(ledger, "start", **run)
    time.sleep(0.2)
    append(ledger, "end", **run)


if __name__ == "__main__":  # the shell job: python chaos_jobs.py LEDGER
    shell_run(sys.argv[1])
