"""A hint above ``kernel_batch_max`` ids (an ``enqueue_many`` batch's one message, issue 42
item 2), through real workers: the process that takes it keeps a share and publishes the
rest again before it runs anything, so the worker's other processes and other workers take
their shares at once; a worker killed while it holds its share loses no run.

The runs wait (boundedly) until runs of the batch have started in as many processes as the
test asks for: each run's ledger line says whether they did, so a batch that one process
kept to itself shows as ``met: false`` instead of depending on timing.
"""

from __future__ import annotations

from typing import Any

import pytest
from integration.stack import Stack
from integration.test_enqueue import Project

#: The module the runs call, written into the stack's working directory (on the
#: workers' PYTHONPATH).
_SHARED_JOBS = '''
import json
import time

from ledger_jobs import append


def until_shared(ledger, ctx, processes, wait_s):
    """A run's line, then up to ``wait_s`` seconds for runs in ``processes`` processes."""
    append(ledger, ctx, "run")
    deadline = time.monotonic() + wait_s
    while True:
        with open(ledger) as lines:
            pids = {json.loads(line)["pid"] for line in lines}
        if len(pids) >= processes or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    append(ledger, ctx, "shared", met=len(pids) >= processes)
    return {"processes": len(pids)}
'''


def shared_job(stack: Stack, processes: int, **fields: Any) -> dict[str, Any]:
    (stack.root / "shared_jobs.py").write_text(_SHARED_JOBS)
    spec = stack.job("shared", "record", lease="30s", **fields)
    spec["payload"] = {
        "callable": "shared_jobs:until_shared",
        "kwargs": {"ledger": str(stack.ledger_path), "processes": processes, "wait_s": 15},
    }
    return spec


def all_succeeded(stack: Stack, ids: list[int]) -> bool:
    return all(stack.occurrence(i).status.value == "succeeded" for i in ids)


def test_a_big_hint_is_shared_with_the_workers_other_process_at_once(stack: Stack) -> None:
    worker = stack.start_worker("worker", concurrency=2)
    stack.define(shared_job(stack, processes=2))
    ids = [stack.run_now("shared") for _ in range(40)]
    stack.send_hints(*ids)  # one message of 40 ids: above kernel_batch_max (16)
    stack.wait(lambda: all_succeeded(stack, ids), timeout=60, what="the batch's runs")

    shared = stack.ledger(event="shared")
    # The first run of the batch already saw a second process at work: the rest had been
    # passed on before it started, not after a long run.
    assert all(line["met"] for line in shared), [s for s in shared if not s["met"]]
    assert len({line["pid"] for line in shared}) == 2
    for occ_id in ids:  # each once
        assert [run["fence"] for run in stack.ledger(occurrence_id=occ_id, event="run")] == [1]
    assert all(worker.owns(line["pid"]) for line in shared)
    assert worker.logged("hint of 40 occurrences split: 14 run here")


@pytest.mark.parametrize("stack", ["redis", "rabbitmq"], indirect=True)
def test_a_big_hint_is_shared_with_another_worker(stack: Stack) -> None:
    workers = [stack.start_worker(name, concurrency=1) for name in ("one", "two")]
    stack.define(shared_job(stack, processes=2))
    ids = [stack.run_now("shared") for _ in range(40)]
    stack.send_hints(*ids)
    stack.wait(lambda: all_succeeded(stack, ids), timeout=60, what="the batch's runs")

    shared = stack.ledger(event="shared")
    assert all(line["met"] for line in shared), [s for s in shared if not s["met"]]
    for worker in workers:
        assert any(worker.owns(line["pid"]) for line in shared), worker.name
    for occ_id in ids:
        assert [run["fence"] for run in stack.ledger(occurrence_id=occ_id, event="run")] == [1]


@pytest.mark.parametrize("stack", ["redis+postgres"], indirect=True)
def test_a_worker_killed_holding_its_share_of_a_big_hint_loses_no_run(stack: Stack) -> None:
    doomed = stack.start_worker("doomed", concurrency=1)
    stack.define(stack.job("slow", "record", kwargs={"sleep": 0.5}, lease="5s"))
    ids = [stack.run_now("slow") for _ in range(40)]
    stack.send_hints(*ids)
    stack.wait(lambda: stack.ledger(), timeout=30, what="the share's first run")

    doomed.crash()  # kill -9 while its process holds its share
    assert doomed.logged("hint of 40 occurrences split: 14 run here")
    killed = {line["occurrence_id"] for line in stack.ledger()}
    # Only now a Beat: its pump hints what no worker took (kernel_rehint_after: 1 s
    # here), its sweep takes back the killed run's lease (5 s).
    stack.start_beat("beat")
    stack.start_worker("rescuer", concurrency=2)
    stack.wait(lambda: all_succeeded(stack, ids), timeout=60, what="every run of the batch")

    for occ_id in ids:
        fences = [run["fence"] for run in stack.ledger(occurrence_id=occ_id)]
        # A run under way when its worker died runs again under a new fence (its lease
        # taken back); every other ran once.
        assert fences == ([1, 2] if occ_id in killed and len(fences) == 2 else [1]), (
            occ_id,
            fences,
        )


#: A project task that waits (boundedly) for a second process, as ``until_shared`` does.
SHARED_TASKS = """\
import json, os, time
from myproj import app

def note(**fields):
    with open("ledger.jsonl", "a") as ledger:
        ledger.write(json.dumps({"pid": os.getpid(), **fields}) + "\\n")

@app.task(name="myproj.shared")
def shared(label):
    note(event="run", label=label)
    deadline = time.monotonic() + 15
    while True:
        with open("ledger.jsonl") as lines:
            pids = {json.loads(line)["pid"] for line in lines}
        if len(pids) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    note(event="shared", label=label, met=len(pids) >= 2)
"""

#: The caller: 40 runs in one enqueue_many, counting the hints it publishes.
MANY = """\
import json
from celery.signals import before_task_publish
from celery_app import enqueue_many
from myproj import app

published = []
before_task_publish.connect(lambda body, **kw: published.append(len(body[0])), weak=False)
made = enqueue_many(app, [{"task": "myproj.shared", "args": [i]} for i in range(40)])
print(json.dumps({"ids": [m.occurrence_id for m in made], "published": published}))
"""


@pytest.mark.parametrize("stack", ["redis+postgres"], indirect=True)
def test_an_enqueue_many_batch_is_one_publish_and_runs_on_every_process(stack: Stack) -> None:
    project, _ = Project.running(stack, SHARED_TASKS, workers=("w1", "w2"), concurrency=1)
    sent = project.client(MANY)
    assert sent["published"] == [40]  # one hint of the 40 ids: the caller's one publish
    stack.wait(lambda: len(project.ledger(event="shared")) == 40, timeout=60, what="the 40 runs")
    shared = project.ledger(event="shared")
    assert all(line["met"] for line in shared), [s for s in shared if not s["met"]]
    assert len({line["pid"] for line in shared}) == 2  # both workers' processes
    assert sorted(line["label"] for line in project.ledger(event="run")) == list(range(40))
