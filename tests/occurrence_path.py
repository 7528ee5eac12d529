"""The modules one occurrence passes through from Beat to its settle, as it runs.

    python -m tests.occurrence_path [--json]

On a throw-away SQLite kernel, one job's firing goes the way a deployment takes it:
Beat plans and fires it (``plan_job``, ``Kernel.fire``), the pump hands it out
(``Kernel.dispatch_batch``), a worker claims, runs and settles it (``run_occurrence``:
the callable adapter, then the settle). Every call into a module of the project is
recorded (``sys.setprofile``); the output is the count and the modules in the order the
occurrence first reached them. The broker is left out: a hint is a message, not a call.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
_PACKAGES = ("kernel", "celery_app", "beat_schedule", "adapters")

__all__ = ["modules_on_the_path", "main"]


def modules_on_the_path() -> list[str]:
    """The project's modules one occurrence's calls pass through, in first-reached order."""
    from adapters.registry import load_adapters
    from celery_app import app
    from celery_app.beat.firings import plan_job
    from celery_app.held_run import LeaseKeeper
    from celery_app.runtime import run_occurrence
    from kernel import Kernel

    reached: dict[str, None] = {}

    def record(frame: FrameType, event: str, _: Any) -> None:
        if event == "call":
            name = frame.f_globals.get("__name__", "")
            if name.split(".")[0] in _PACKAGES:
                reached.setdefault(name)

    with tempfile.TemporaryDirectory() as folder:
        kernel = Kernel.open(f"sqlite:///{folder}/kernel.db", migrate_schema=True)
        try:
            kernel.define_job(
                {
                    "id": "path",
                    "kind": "callable",
                    "schedule": {"every": "1s"},
                    "payload": {"callable": "os:getpid"},
                }
            )
            adapters = load_adapters(app)
            time.sleep(1.5)  # its first firing is due
            (job,) = kernel.due_jobs()
            sys.setprofile(record)
            try:
                plan = plan_job(kernel, job, kernel.now())
                kernel.fire(
                    job.id,
                    expected_revision=job.revision,
                    expected_cursor=None,
                    firings=plan.fire[:1],
                    next_cursor=plan.fire[0],
                )
                (hint,) = kernel.dispatch_batch(limit=1, rehint_after=60)
                outcome = run_occurrence(
                    kernel, adapters, hint.occurrence_id, main_pid=0, keeper=LeaseKeeper()
                )
            finally:
                sys.setprofile(None)
            assert outcome.result == "succeeded", outcome
        finally:
            kernel.close()
    return list(reached)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    modules = modules_on_the_path()
    if args.json:
        print(json.dumps({"count": len(modules), "modules": modules}))
    else:
        print(f"{len(modules)} modules from Beat's firing to the settle:")
        for name in modules:
            print(f"  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
