"""A chord's group body when its header fails (issue 40), routed through the kernel on a
real worker, measured against stock Celery on the same app and Redis.

As Celery's backend does (``_handle_group_chord_error``): each task of the group body
calls its own errbacks — the chord's ``link_error`` is on each, so it runs once per task,
given that task's id — and each task's result is a FAILURE; a chord among the body's
tasks calls its body's errbacks under its body's id. A group body's own ``link_error``
replaces its tasks' when the header succeeds and a task of it fails."""

from __future__ import annotations

from collections import Counter

import pytest
from integration.stack import Stack
from integration.test_enqueue import NOTING, Project

pytestmark = pytest.mark.long

TASKS = (
    NOTING
    + """\

def add(x, y):
    return x + y

def fail(*args):
    raise KeyError("expected")

def tsum(values):
    note(task="tsum", values=values)
    return sum(values)

def old_style(task_id, label):
    note(task="errback", label=label, failed=task_id)

def echo(label):
    note(task="errback", label=label, failed=None)

for side in ("routed", "stock"):
    for body in (add, fail, tsum, old_style, echo):
        app.task(name=f"myproj.{side}.{body.__name__}", shared=False)(body)
"""
)

CALLS = """\
import json
from celery import chord, group
from myproj import app
app.loader.import_default_modules()

out = {}
for side in ("routed", "stock"):
    t = {name: app.tasks[f"myproj.{side}.{name}"]
         for name in ("add", "fail", "tsum", "old_style", "echo")}
    ids = out[side] = {}
    # A group body: its first task with an errback of its own; the chord's on each task.
    first = t["tsum"].s()
    first.link_error(t["old_style"].s(f"{side}-own"))
    body = group(first, t["tsum"].s())
    made = chord([t["add"].si(1, 1), t["fail"].si()], body).apply_async(
        link_error=t["old_style"].s(f"{side}-chord"))
    ids["group"] = [r.id for r in made.results]
    # A chord among the body's tasks: its body's errbacks, under its body's id.
    inner = chord([t["add"].si(2, 2)], t["tsum"].s())
    workflow = chord([t["add"].si(1, 1), t["fail"].si()], group(inner, t["tsum"].s()))
    workflow.link_error(t["old_style"].s(f"{side}-nested"))
    made = workflow.apply_async()
    ids["nested"] = [r.id for r in made.results]
    # The header succeeds, a task of the group body fails: the group's own link_error
    # (the chord's added to it) replaces its tasks'.
    body = group(t["fail"].s(), t["tsum"].s()).set(link_error=t["echo"].si(f"{side}-group"))
    chord([t["add"].si(1, 1)], body).apply_async(link_error=t["echo"].si(f"{side}-outer"))
print(json.dumps(out))
"""

STATES = """\
import json
from myproj import app
print(json.dumps([app.AsyncResult(i).state for i in IDS]))
"""


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_a_group_bodys_errbacks_run_as_stock_celery_runs_them(stack: Stack) -> None:
    project, _ = Project.running(stack, TASKS)

    ids = project.client(CALLS)
    # Per side: own + chord x 2 (group), nested x 2, group + outer.
    wanted = 2 * (3 + 2 + 2)
    calls = stack.wait(
        lambda: (lambda x: x if len(x) >= wanted else None)(project.ledger(task="errback")),
        timeout=90,
        what="every errback ran",
    )
    for side in ("routed", "stock"):
        got = ids[side]
        seen = Counter(
            (x["label"].removeprefix(f"{side}-"), x["failed"])
            for x in calls
            if x["label"].startswith(f"{side}-")
        )
        first, second = got["group"]
        inner, last = got["nested"]
        assert seen == {
            ("own", first): 1, ("chord", first): 1, ("chord", second): 1,
            ("nested", inner): 1, ("nested", last): 1,
            ("group", None): 1, ("outer", None): 1,
        }, side  # fmt: skip
        # Each task of the body is failed in the result backend, as stock's are.
        states = project.client(STATES.replace("IDS", repr(got["group"] + got["nested"])))
        assert states == ["FAILURE"] * 4, side
    assert len(calls) == wanted
    # No task of a body whose header failed ran; the third chord's tsum did, once a side.
    assert len(project.ledger(task="tsum")) == 2
