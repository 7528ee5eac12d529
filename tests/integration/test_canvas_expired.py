"""A chord's member that expires before it starts (issue 40), routed through the kernel on
a real worker, measured against stock Celery on the same Redis (broker and result
backend).

Stock Celery's worker revokes a task whose ``expires`` passed before it runs: its result
is REVOKED with ``TaskRevokedError('expired')``, and its chord fails (the body's result
FAILURE with ``ChordError``, the body's errbacks called, the body never run). Routed, the
kernel skips the member ``expired`` and fails its chord in that transaction: the caller
sees the same, where before the chord stayed open and ``.get()`` waited out its timeout.
The member is given ``countdown=4, expires=2``: due only after its deadline, whichever
side holds it.
"""

from __future__ import annotations

import pytest
from integration.stack import Stack
from integration.test_enqueue import NOTING, Project

pytestmark = pytest.mark.long

TASKS = (
    NOTING
    + """\

def add(x, y):
    return x + y

def tsum(values):
    note(task="tsum", values=values)
    return sum(values)

def old_style(task_id, label):
    note(task="old_style", label=label, failed=task_id)

def new_style(request, exc, traceback, label):
    note(task="new_style", label=label, failed=request.id, exc=type(exc).__name__)

for side in ("routed", "stock"):
    for body in (add, tsum, old_style, new_style):
        app.task(name=f"myproj.{side}.{body.__name__}", shared=False)(body)
"""
)

CALLS = """\
import json
from celery import chord, uuid
from myproj import app
app.loader.import_default_modules()

made = {}
for side in ("routed", "stock"):
    t = {name: app.tasks[f"myproj.{side}.{name}"]
         for name in ("add", "tsum", "old_style", "new_style")}
    late = t["add"].s(2, 2).set(countdown=4, expires=2, task_id=uuid())
    body = t["tsum"].s().on_error(t["old_style"].s(f"{side}-old")).on_error(
        t["new_style"].s(f"{side}-new"))
    result = chord([t["add"].s(1, 1), late])(body)
    made[side] = {"body": result.id, "late": late.id}

out = {}
for side, ids in made.items():
    try:
        app.AsyncResult(ids["body"]).get(timeout=60)
        error = None
    except Exception as exc:
        error = [type(exc).__name__, str(exc).replace(ids["late"], "<late>")]
    late = app.AsyncResult(ids["late"])
    out[side] = {**ids, "error": error, "late_state": late.state, "late_result": repr(late.result)}
print(json.dumps(out))
"""


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_a_chord_member_that_expires_fails_the_chord_as_stock_celery_does(stack: Stack) -> None:
    project, _ = Project.running(stack, TASKS)
    got = project.client(CALLS)
    routed, stock = got["routed"], got["stock"]
    assert stock["error"] == ["ChordError", "Dependency <late> raised TaskRevokedError('expired')"]
    assert routed["error"] == stock["error"]
    for side in (routed, stock):
        assert (side["late_state"], side["late_result"]) == (
            "REVOKED",
            "TaskRevokedError('expired')",
        )
    # Each errback once, given the body's id (and, new style, the ChordError).
    calls = stack.wait(
        lambda: (lambda x: x if len(x) >= 4 else None)(
            project.ledger(task="old_style") + project.ledger(task="new_style")
        ),
        timeout=60,
        what="every errback ran",
    )
    for name, side in (("routed", routed), ("stock", stock)):
        mine = sorted(
            (x["task"], x["failed"], x.get("exc")) for x in calls if x["label"].startswith(name)
        )
        assert mine == [
            ("new_style", side["body"], "ChordError"),
            ("old_style", side["body"], None),
        ], name
    assert len(calls) == 4
    assert project.ledger(task="tsum") == []
    # Routed: the kernel skipped the member, never ran it.
    [late] = [
        o for o in stack.occurrences("task:myproj.routed.add") if o.status.value != "succeeded"
    ]
    assert (late.status.value, late.skip_reason) == ("skipped", "expired")
