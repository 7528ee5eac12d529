"""Errbacks as Celery calls them (issue 40), routed through the kernel on a real worker,
measured against stock Celery on the same Redis (broker and result backend).

Celery calls an errback whose task takes more than one argument ``errback(request, exc,
traceback)`` (its own stored arguments after them), any other ``errback(task_id)``: a
routed task's ``link_error``, a group member's, and a chord's (called with the body's
request when a member fails) are called the same way routed as stock, with the failed
task's id in ``request.id`` and the exception the backend holds. Bytes in a call's and an
errback's arguments reach the body as bytes, as Celery's JSON carries them.
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

def fail(*args):
    raise KeyError("expected", *args)

def tsum(values):
    note(task="tsum", values=values)
    return sum(values)

def new_style(request, exc, traceback, label):
    note(task="new_style", label=label, failed=request.id, exc=type(exc).__name__,
         traceback=isinstance(traceback, str))

def old_style(task_id, label):
    note(task="old_style", label=label, failed=task_id)

def echo(value, label):
    note(task="echo", label=label, value=repr(value))

for side in ("routed", "stock"):
    for body in (fail, tsum, new_style, old_style, echo):
        app.task(name=f"myproj.{side}.{body.__name__}", shared=False)(body)
"""

CALLS = """\
import json
from celery import chord, group
from myproj import app
app.loader.import_default_modules()

out = {}
for side in ("routed", "stock"):
    t = {name: app.tasks[f"myproj.{side}.{name}"]
         for name in ("fail", "tsum", "new_style", "old_style", "echo")}
    ids = out[side] = {}
    for style in ("new_style", "old_style"):
        failed = t["fail"].apply_async(link_error=t[style].s(f"{side}-{style}-task"))
        ids[f"{style}-task"] = failed.id
        made = chord([t["fail"].s()])(t["tsum"].s().on_error(t[style].s(f"{side}-{style}-chord")))
        ids[f"{style}-chord"] = made.id
        members = group(t["fail"].s(1), t["fail"].s(2))
        members.link_error(t[style].s(f"{side}-{style}-group"))
        ids[f"{style}-group"] = [r.id for r in members.delay().results]
    # Celery's JSON carries bytes (and datetime, Decimal, UUID): a call's and an errback's.
    t["echo"].delay(b"call", f"{side}-bytes")
    t["fail"].apply_async(link_error=t["echo"].si(b"errback", f"{side}-bytes"))
print(json.dumps(out))
"""


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_errbacks_of_a_task_a_chord_and_a_group_are_called_as_stock_celery_calls_them(
    stack: Stack,
) -> None:
    project, _ = Project.running(stack, TASKS)

    ids = project.client(CALLS)
    # Per side: a task's errback, a chord's, and one per failed group member, each style.
    wanted = 2 * 2 * (1 + 1 + 2)
    calls = stack.wait(
        lambda: (lambda x: x if len(x) >= wanted else None)(
            project.ledger(task="new_style") + project.ledger(task="old_style")
        ),
        timeout=90,
        what="every errback ran",
    )
    for side in ("routed", "stock"):
        got = ids[side]
        for style in ("new_style", "old_style"):
            for what in ("task", "chord", "group"):
                label = f"{side}-{style}-{what}"
                failed = sorted(x["failed"] for x in calls if x["label"] == label)
                # The chord's errback gets the body's id, as Celery's chord_error_from_stack.
                assert failed == sorted(got[f"{style}-{what}"] if what == "group" else
                                        [got[f"{style}-{what}"]]), label  # fmt: skip
        new = [x for x in calls if x["task"] == "new_style" and x["label"].startswith(side)]
        by_label = {x["label"]: (x["exc"], x["traceback"]) for x in new}
        assert by_label[f"{side}-new_style-task"] == ("KeyError", True)
        assert by_label[f"{side}-new_style-chord"][0] == "ChordError"
    assert len(calls) == wanted
    assert project.ledger(task="tsum") == []
    echoed = stack.wait(
        lambda: (lambda x: x if len(x) >= 4 else None)(project.ledger(task="echo")),
        timeout=60,
        what="every echo ran",
    )
    for side in ("routed", "stock"):
        values = sorted(x["value"] for x in echoed if x["label"] == f"{side}-bytes")
        assert values == ["b'call'", "b'errback'"], side
