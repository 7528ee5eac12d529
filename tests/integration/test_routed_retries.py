"""A routed task's ``self.retry(args=..., kwargs=...)`` and ``raise Reject(...)`` (issue 40),
measured against stock Celery on the same Redis (broker and result backend).

* ``self.retry(args=...)`` / ``self.retry(kwargs=...)``: the retry runs with the new
  arguments, merged as Celery merges them; the body sees ``is_eager`` False; in the
  kernel the retry is the same occurrence's second attempt, its payload the new one;
* ``raise Reject(requeue=True)``: a redelivery, not a failure: the run goes back to the
  queue without spending an attempt (a hand back) and the run that takes it back sees
  ``delivery_info["redelivered"]``; ``Reject(requeue=False)`` is the task's FAILURE.
"""

from __future__ import annotations

import pytest
from integration.stack import Stack
from integration.test_enqueue import Project

pytestmark = pytest.mark.long

TASKS = """\
from celery.exceptions import Reject
from myproj import app

def to_args(self, foo, bar, label=None):
    if not self.request.retries:
        raise self.retry(args=(foo + 1, bar + 1), countdown=0)
    return {"foo": foo, "bar": bar, "label": label, "retries": self.request.retries,
            "is_eager": self.request.is_eager}

def to_kwargs(self, foo, bar):
    if not self.request.retries:
        raise self.retry(kwargs={"foo": foo + 1}, countdown=0)
    return {"foo": foo, "bar": bar, "retries": self.request.retries,
            "is_eager": self.request.is_eager}

def requeued(self):
    if not self.request.delivery_info.get("redelivered"):
        raise Reject(requeue=True)
    return "second-pass"

def refused(self):
    raise Reject("rejected", requeue=False)

for side in ("routed", "stock"):
    for body in (to_args, to_kwargs):
        app.task(name=f"myproj.{side}.{body.__name__}", bind=True, max_retries=1,
                 shared=False)(body)
    for body in (requeued, refused):
        app.task(name=f"myproj.{side}.{body.__name__}", bind=True, acks_late=True,
                 shared=False)(body)
"""

CLIENT = """\
import json
from myproj import app
app.loader.import_default_modules()

def read(result):
    value = result.get(timeout=60, propagate=False)
    return {"value": value if result.successful() else type(value).__name__,
            "status": result.status}

out = {}
for side in ("routed", "stock"):
    tasks = {name: app.tasks[f"myproj.{side}.{name}"]
             for name in ("to_args", "to_kwargs", "requeued", "refused")}
    calls = {
        "to_args": tasks["to_args"].apply_async(kwargs={"foo": 1, "bar": 2, "label": "kept"}),
        "to_kwargs": tasks["to_kwargs"].apply_async(args=(1, 2)),
        "requeued": tasks["requeued"].delay(),
        "refused": tasks["refused"].delay(),
    }
    out[side] = {name: read(result) for name, result in calls.items()}
    out[side]["ids"] = {name: result.id for name, result in calls.items()}
print(json.dumps(out))
"""


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_retry_with_new_arguments_and_reject_answer_as_stock_celery(stack: Stack) -> None:
    project, _ = Project.running(stack, TASKS)

    out = project.client(CLIENT)
    routed, stock = out.pop("routed"), out.pop("stock")
    ids = routed.pop("ids")
    stock.pop("ids")
    assert stock == {
        "to_args": {"value": {"foo": 2, "bar": 3, "label": "kept", "retries": 1,
                              "is_eager": False}, "status": "SUCCESS"},
        "to_kwargs": {"value": {"foo": 2, "bar": 2, "retries": 1, "is_eager": False},
                      "status": "SUCCESS"},
        "requeued": {"value": "second-pass", "status": "SUCCESS"},
        "refused": {"value": "Reject", "status": "FAILURE"},
    }  # fmt: skip
    assert routed == stock

    # The kernel's side: one occurrence per call; the retry its second attempt with the
    # new arguments; the requeued one handed back once, its only attempt spent once.
    [to_args] = stack.occurrences("task:myproj.routed.to_args")
    assert to_args.trigger_key == f"key:{ids['to_args']}"
    assert (to_args.status.value, to_args.attempt) == ("succeeded", 2)
    assert to_args.payload["args"] == [2, 3] and to_args.payload["kwargs"] == {"label": "kept"}
    [to_kwargs] = stack.occurrences("task:myproj.routed.to_kwargs")
    assert to_kwargs.payload["args"] == [2, 2] and to_kwargs.payload["kwargs"] == {}
    [requeued] = stack.occurrences("task:myproj.routed.requeued")
    assert (requeued.status.value, requeued.attempt, requeued.fence) == ("succeeded", 1, 2)
    events = [kind for kind, _ in stack.event_types(requeued.id)]
    assert events.count("occurrence_handed_back") == 1
    [refused] = stack.occurrences("task:myproj.routed.refused")
    assert refused.status.value == "dead_letter" and refused.attempt == 1
