"""What a Beat entry's ``options`` give the body's ``self.request`` (issue 40's owed mends).

Celery's Beat passes an entry's options to ``apply_async`` and adds its own custom header
``celery_beat_task``: the body sees the entry's headers (each also a field of
``self.request``) and its time limits as ``self.request.timelimit``. The same entry fired
by the kernel's Beat (its run made by the kernel, the body called by a kernel worker)
gives the body the same request, measured against stock Celery's Beat on the same app
and worker.
"""

from __future__ import annotations

import pytest
from integration.stack import Stack
from integration.test_enqueue import Project

pytestmark = pytest.mark.long

SETTINGS = """\
imports = ["myproj_tasks"]
kernel_rehint_after = 1.0
beat_schedule = {
    "seen": {"task": "myproj.seen", "schedule": 1.0,
             "options": {"headers": {"tenant": "t-1"}, "time_limit": 30, "soft_time_limit": 20}},
}
"""

TASKS = """\
import json
from myproj import app

@app.task(name="myproj.seen", bind=True)
def seen(self):
    request = self.request
    with open("ledger.jsonl", "a") as ledger:
        ledger.write(json.dumps({
            "kernel": bool(getattr(request, "kernel_run", False)),
            "headers": request.headers,
            "tenant": getattr(request, "tenant", None),
            "celery_beat_task": getattr(request, "celery_beat_task", None),
            "timelimit": list(request.timelimit or ()),
        }) + "\\n")
"""


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_a_beat_entry_s_headers_and_time_limits_reach_the_body_as_under_stock_beat(
    stack: Stack,
) -> None:
    project = Project(stack, settings=SETTINGS, tasks=TASKS)
    project.worker("w1")
    project.beat()  # the kernel's scheduler, install(app)'s default
    project.start("stock-beat", "beat", "-S", "celery.beat:PersistentScheduler",
                  "-s", str(stack.root / "stock-schedule"), "-l", "INFO")  # fmt: skip

    def both() -> dict[bool, dict[str, object]] | None:
        fired = {line.pop("kernel"): line for line in project.ledger()}
        return fired if len(fired) == 2 else None

    fired = stack.wait(both, timeout=60, what="a firing of each Beat ran")
    stock = fired[False]
    assert stock == {
        "headers": {"tenant": "t-1", "celery_beat_task": True},
        "tenant": "t-1",
        "celery_beat_task": True,
        "timelimit": [30, 20],
    }
    assert fired[True] == stock
