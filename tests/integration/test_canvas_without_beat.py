"""A routed chain or chord goes on without a Beat, as a stock one does: the worker whose
settle makes a chain's next step or a chord's body publishes its hint once the settle
commits (``Kernel.on_runs_made``), where these waited for Beat's pump before. Errbacks
stay the pump's (Celery calls them once the failure is stored, which for a chord is after
the settle). Measured against stock Celery's same canvas on the same worker, Redis as
broker and backend."""

from __future__ import annotations

import pytest
from integration.stack import Stack
from integration.test_enqueue import NOTING, ROUTED_AND_STOCK, Project

TASKS = (
    NOTING
    + """\

def add(x, y):
    return x + y

def tsum(values):
    return sum(values)

def fail():
    raise KeyError("expected")

def on_error(task_id, label):
    note(task="on_error", label=label, failed=task_id)

for side in ("routed", "stock"):
    for body in (add, tsum, fail, on_error):
        app.task(name=f"myproj.{side}.{body.__name__}")(body)
"""
)

CLIENT = """\
import json
from celery import chain, chord
import myproj_tasks  # noqa: F401 (registers the tasks)
from myproj import app

def canvas(side):
    t = lambda name: app.tasks[f"myproj.{side}.{name}"]
    add, tsum, fail, on_error = t("add"), t("tsum"), t("fail"), t("on_error")
    chained = chain(add.s(1, 1), add.s(1), add.s(1)).apply_async().get(timeout=30)
    chorded = chord([add.s(i, i) for i in range(3)], tsum.s()).apply_async().get(timeout=30)
    failing = fail.apply_async(link_error=on_error.s(side))
    failing.get(timeout=30, propagate=False)
    return {"chain": chained, "chord": chorded, "failed": failing.id}

print(json.dumps({side: canvas(side) for side in ("stock", "routed")}))
"""


@pytest.mark.parametrize("stack", ["redis", "redis+postgres"], indirect=True)
def test_a_routed_chain_and_chord_complete_without_a_beat_as_stock_does(stack: Stack) -> None:
    project = Project(stack, settings=ROUTED_AND_STOCK, tasks=TASKS)
    project.worker("w1", concurrency=2)  # and no Beat: nothing else publishes a hint
    answers = project.client(CLIENT)
    assert answers["routed"]["chain"] == answers["stock"]["chain"] == 4
    assert answers["routed"]["chord"] == answers["stock"]["chord"] == 6
    # The routed errback waits for Beat's pump.
    stack.wait(lambda: project.ledger(task="on_error"), timeout=30, what="stock's errback")
    assert [e["label"] for e in project.ledger(task="on_error")] == ["stock"]
    project.beat()
    errbacks = stack.wait(
        lambda: len(found := project.ledger(task="on_error")) == 2 and found,
        timeout=30,
        what="the routed errback run, hinted by Beat's pump",
    )
    assert sorted((e["label"], e["failed"]) for e in errbacks) == [
        ("routed", answers["routed"]["failed"]),
        ("stock", answers["stock"]["failed"]),
    ]
