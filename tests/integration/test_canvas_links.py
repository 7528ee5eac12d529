"""Links end to end (issue 40): a routed chain and a routed link_error on real workers.

* ``chain(add.s(1, 2), mul.s(10), mul.s(2))`` with ``add`` routed: each step is an
  occurrence made by the settle of the one before, its first argument the previous
  result; the chain's AsyncResult id is the last step's key, whose stored result is
  the chain's (read from the kernel: writing results to Celery's backend is another
  slice's);
* ``dies.apply_async(link_error=on_error.s())`` whose worker is SIGKILLed on its last
  attempt: Beat's lease expiry dead-letters it and makes the errback, which runs once
  with the dead run's task id (Celery's ``errback(task_id)``), although stock Celery
  never calls a link_error for a killed worker's task.
"""

from __future__ import annotations

import pytest
from integration.stack import Stack
from integration.test_enqueue import Project

pytestmark = pytest.mark.long

SETTINGS = """\
imports = ["myproj_tasks"]
kernel_route_tasks = ["myproj.add", "myproj.dies"]
kernel_rehint_after = 1.0
"""

TASKS = """\
import json, os, time
from myproj import app

def note(**fields):
    with open("ledger.jsonl", "a") as ledger:
        ledger.write(json.dumps({"pid": os.getpid(), **fields}) + "\\n")

@app.task(name="myproj.add")
def add(x, y):
    return x + y

@app.task(name="myproj.mul")
def mul(x, y):
    note(task="mul", args=[x, y])
    return x * y

@app.task(name="myproj.dies", kernel_options={"lease": "5s", "max_attempts": 1,
                                              "max_lost_leases": 0})
def dies(label):
    note(task="dies", label=label)
    time.sleep(60)

@app.task(name="myproj.on_error")
def on_error(task_id):
    note(task="on_error", failed=task_id)
"""

CHAIN = """\
import json
from celery import chain
from myproj_tasks import add, mul
answer = chain(add.s(1, 2), mul.s(10), mul.s(2)).apply_async()
print(json.dumps({"id": answer.id}))
"""

DIES = """\
import json
from myproj_tasks import dies, on_error
dies.apply_async(("x",), task_id="dies-1", link_error=on_error.s())
print(json.dumps({}))
"""


@pytest.mark.parametrize("stack", ["embedded", "redis+postgres"], indirect=True)
def test_a_routed_chain_runs_step_by_step_and_a_killed_run_s_errback_runs_once(
    stack: Stack,
) -> None:
    project, [first] = Project.running(stack, TASKS, settings=SETTINGS)

    last_id = project.client(CHAIN)["id"]
    last = stack.wait(
        lambda: [o for o in stack.occurrences("task:myproj.mul")
                 if o.trigger_key == f"key:{last_id}" and o.status.value == "succeeded"],
        timeout=60,
        what="the chain's last step succeeded",
    )  # fmt: skip
    assert last[0].result == 60
    assert [x["args"] for x in project.ledger(task="mul")] == [[3, 10], [30, 2]]

    project.client(DIES)
    stack.wait(lambda: project.ledger(task="dies"), timeout=30, what="dies started")
    first.crash()  # SIGKILL on its only attempt, with no lost lease left
    project.worker("w2")
    errback = stack.wait(
        lambda: [o for o in stack.occurrences("task:myproj.on_error")
                 if o.status.value == "succeeded"],
        timeout=60,
        what="the errback ran",
    )  # fmt: skip
    [dead] = stack.occurrences("task:myproj.dies")
    assert dead.status.value == "dead_letter"
    assert len(errback) == 1 and errback[0].payload["args"] == ["dies-1"]
    assert project.ledger(task="on_error") == [
        {"pid": project.ledger(task="on_error")[0]["pid"], "task": "on_error", "failed": "dies-1"}
    ]
