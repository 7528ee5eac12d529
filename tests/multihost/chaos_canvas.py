"""The chaos run's canvas firings: routed Celery tasks and the driver that applies them.

The workers import this module (``imports`` of the chaos settings) and route its tasks
through the kernel (``kernel_route_tasks``). The driver, run as a script on the services
host, applies every ``--every`` seconds, through the product's ready-made app as a user
would: a chord of ``MEMBERS`` members whose body records their results, its body carrying
a ``link_error``; every third round one member fails on purpose (the chord must fail:
no body, the errback once) and a failing task with a ``link_error`` of its own is applied
too; and a chain of 3 steps, each given the previous one's result. Every run appends its
``start`` and ``end`` to the ledger (``event`` ``canvas``, with its role, its canvas and
its Celery task id); the driver appends ``canvas_applying`` before each apply and
``canvas_applied`` once it returned. ``canvas_checker.py`` judges them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from typing import Any

from celery import chain, chord
from chaos_jobs import append

from celery_app import app

__all__ = ["MEMBERS", "STEPS", "drive"]

MEMBERS = 5
STEPS = 3
#: Every how many rounds a chord has a member that fails on purpose.
DOOMED_EVERY = 3
_RUNS = {
    "lease": "5s",
    "max_attempts": 50,
    "retry": {"backoff": "1s", "factor": 1, "max": "2s", "jitter": 0},
}
#: Long enough for the faults aimed at busy workers to strike runs of canvases too.
_WORK_S = 1.0
#: A run that fails on purpose is dead-lettered at once.
_FAILS = {"lease": "5s", "max_attempts": 1}


def _note(task: Any, role: str, phase: str, ledger: str, canvas: str, **extra: Any) -> None:
    append(
        ledger,
        "canvas",
        role=role,
        phase=phase,
        canvas=canvas,
        task_id=task.request.id,
        attempt=task.request.retries + 1,
        pid=os.getpid(),
        **extra,
    )


@app.task(name="chaos_canvas.member", bind=True, queue="chaos", kernel_options=_RUNS)
def member(self: Any, *, ledger: str, canvas: str, index: int) -> str:
    _note(self, "member", "start", ledger, canvas, index=index)
    time.sleep(_WORK_S)
    _note(self, "member", "end", ledger, canvas, index=index)
    return f"{canvas}:{index}"


@app.task(name="chaos_canvas.doomed", bind=True, queue="chaos", kernel_options=_FAILS)
def doomed(self: Any, *, ledger: str, canvas: str, index: int) -> str:
    _note(self, "doomed", "start", ledger, canvas, index=index)
    raise RuntimeError(f"canvas {canvas} member {index} fails on purpose")


@app.task(name="chaos_canvas.body", bind=True, queue="chaos", kernel_options=_RUNS)
def body(self: Any, results: list[str], *, ledger: str, canvas: str) -> int:
    _note(self, "body", "start", ledger, canvas, results=results)
    time.sleep(_WORK_S)
    _note(self, "body", "end", ledger, canvas, results=results)
    return len(results)


@app.task(name="chaos_canvas.on_error", bind=True, queue="chaos", kernel_options=_RUNS)
def on_error(self: Any, failed: str, *, ledger: str, canvas: str) -> None:
    _note(self, "errback", "start", ledger, canvas, failed=failed)
    _note(self, "errback", "end", ledger, canvas, failed=failed)


@app.task(name="chaos_canvas.step", bind=True, queue="chaos", kernel_options=_RUNS)
def step(self: Any, *previous: list[int], ledger: str, canvas: str, n: int) -> list[int]:
    done = list(previous[0]) if previous else []
    _note(self, "step", "start", ledger, canvas, n=n, previous=done)
    time.sleep(_WORK_S)
    _note(self, "step", "end", ledger, canvas, n=n, previous=done)
    return [*done, n]


def _apply(ledger: str, kind: str, canvas: str, fire: Any, **plan: Any) -> None:
    """Apply one canvas, noting it before and after; an apply that raised (the database
    or the broker down for a fault) is noted with why and judged only if it ran."""
    append(ledger, "canvas_applying", kind=kind, canvas=canvas, **plan)
    try:
        fire()
    except Exception as exc:  # the fault's doing: the checker judges what ran
        append(ledger, "canvas_refused", kind=kind, canvas=canvas, error=repr(exc)[:200])
        return
    append(ledger, "canvas_applied", kind=kind, canvas=canvas, **plan)


def _round(ledger: str, number: int) -> None:
    tag = f"r{number}-{uuid.uuid4().hex[:6]}"
    runs = {"ledger": ledger}
    doomed_at = MEMBERS // 2 if number % DOOMED_EVERY == DOOMED_EVERY - 1 else None
    header = [
        (doomed if i == doomed_at else member).s(canvas=f"chord-{tag}", index=i, **runs)
        for i in range(MEMBERS)
    ]
    body_id = str(uuid.uuid4())
    callback = body.s(canvas=f"chord-{tag}", **runs).set(task_id=body_id)
    callback = callback.on_error(on_error.s(canvas=f"chord-{tag}", **runs))
    _apply(
        ledger,
        "chord",
        f"chord-{tag}",
        lambda: chord(header)(callback),
        members=MEMBERS,
        doomed=doomed_at,
        body_id=body_id,
    )
    steps = [step.s(canvas=f"chain-{tag}", n=n, **runs) for n in range(STEPS)]
    _apply(ledger, "chain", f"chain-{tag}", lambda: chain(*steps).apply_async(), steps=STEPS)
    if doomed_at is not None:
        task_id = str(uuid.uuid4())
        call = doomed.s(canvas=f"link-{tag}", index=0, **runs)
        errback = on_error.s(canvas=f"link-{tag}", **runs)
        _apply(
            ledger,
            "link_error",
            f"link-{tag}",
            lambda: call.apply_async(task_id=task_id, link_error=errback),
            task_id=task_id,
        )


def drive(ledger: str, every_s: float, seconds: float) -> None:
    """Apply a round every ``every_s`` seconds for ``seconds``."""
    end = time.monotonic() + seconds
    number = 0
    while time.monotonic() < end:
        started = time.monotonic()
        _round(ledger, number)
        number += 1
        time.sleep(max(0.0, started + every_s - time.monotonic()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ledger")
    parser.add_argument("--every", type=float, default=6.0)
    parser.add_argument("--seconds", type=float, required=True)
    args = parser.parse_args()
    drive(args.ledger, args.every, args.seconds)
    sys.exit(0)
