"""A task's ``kernel_options`` for its routed calls (issue 40), through a real worker on
Redis and PostgreSQL: each honoured or refused naming it, never accepted and ignored.

* ``max_queued: 2``: two calls held back by a countdown wait; a third is refused at the
  call (``STATE_CONFLICT``, ``settings.max_queued``); once they ran, a call is admitted;
* ``expires``: a call no worker takes in time is skipped ``expired``, never run late;
* ``schedule`` (a Beat entry's field) is refused at the call, naming it; nothing runs.
"""

from __future__ import annotations

import pytest
from integration.stack import Stack
from integration.test_enqueue import Project

pytestmark = pytest.mark.long

TASKS = """\
import json, os
from myproj import app

def note(**fields):
    with open("ledger.jsonl", "a") as ledger:
        ledger.write(json.dumps(fields) + "\\n")

@app.task(name="myproj.routed.bounded", kernel_options={"max_queued": 2})
def bounded(x):
    note(task="bounded", x=x)
    return x

@app.task(name="myproj.routed.expiring", kernel_options={"expires": 1, "queue": "nobody"})
def expiring():
    note(task="expiring")

@app.task(name="myproj.routed.scheduled", kernel_options={"schedule": {"every": "30s"}})
def scheduled():
    note(task="scheduled")
"""

CALLS = """\
import json, time
from celery_app.enqueueing import process_kernel
from myproj import app
app.loader.import_default_modules()
from myproj_tasks import bounded, expiring, scheduled

def refusal(call):
    try:
        call()
    except Exception as exc:
        return [exc.code, exc.details.get("field"), exc.message]
    return "admitted"

out = {}
held = [bounded.apply_async((i,), countdown=2) for i in range(2)]
out["third"] = refusal(lambda: bounded.delay(2))
out["held"] = [r.get(timeout=30) for r in held]
out["after"] = bounded.delay(3).get(timeout=30)
out["scheduled"] = refusal(scheduled.delay)
expiring.delay()  # on a queue no worker takes: Beat skips it at its deadline
kernel = process_kernel(app)
for _ in range(300):
    runs = kernel.list_occurrences(job_id="task:myproj.routed.expiring")
    if runs[0].status != "queued":
        break
    time.sleep(0.1)
out["expiring"] = [runs[0].status, runs[0].skip_reason]
print(json.dumps(out))
"""


@pytest.mark.parametrize("stack", ["redis+postgres"], indirect=True)
def test_a_tasks_kernel_options_are_honoured_or_refused_for_its_calls(stack: Stack) -> None:
    project, _ = Project.running(stack, TASKS)
    out = project.client(CALLS)
    code, field, message = out["third"]
    assert (code, field) == ("STATE_CONFLICT", "settings.max_queued")
    assert "max_queued 2" in message
    assert out["held"] == [0, 1] and out["after"] == 3
    assert sorted(x["x"] for x in project.ledger(task="bounded")) == [0, 1, 3]  # never 2
    assert out["scheduled"][:2] == ["INVALID_ARGUMENT", "settings.schedule"]
    assert out["expiring"] == ["skipped", "expired"]
    assert project.ledger(task="expiring") == [] and project.ledger(task="scheduled") == []
