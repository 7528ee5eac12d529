"""``self.replace(sig)`` end to end (issue 40): routed through the kernel on a real
worker, measured against stock Celery on the same app and Redis (broker and backend).

A routed run that replaces itself ends without a result; its settle makes the
replacement as occurrences (a task, a chain, a chord), the step Celery gave the run's
task id answering the caller's ``AsyncResult``, with the run's chain rest and chord
place: a simple replace, a nested one (``replaced_task_nesting`` 0, 1, 2, 3 as Celery
counts it), one inside a chain's step, inside a chord's member, and replacements by a
chain, by a chord and by a group (Celery makes it a chord over its builtin
``celery.accumulate``, which the kernel runs) answer what stock Celery answers; a
replacement with a task that is not routed is refused, naming it.

A worker SIGKILLed after the body replaced itself and before its settle committed
leaves nothing made: the run's lease expires, another worker runs it again, and that
run's settle makes the replacement, once (SQLite, and PostgreSQL).
"""

from __future__ import annotations

import pytest
from integration.stack import Stack
from integration.test_enqueue import Project

pytestmark = pytest.mark.long

TASKS = """\
import json, os, time
from celery import chain, chord, group, signals
from myproj import app

def add(x, y):
    return x + y

def tsum(values):
    return sum(values)

def _of(self, name):
    return app.tasks[self.name.rsplit(".", 1)[0] + "." + name]

def replaced(self, x):
    return self.replace(_of(self, "add").s(x, 10))

def nested(self, left, seen=None):
    seen = [*(seen or []), self.request.replaced_task_nesting]
    if left:
        raise self.replace(_of(self, "nested").s(left - 1, seen))
    return seen

def to_chain(self, x):
    return self.replace(chain(_of(self, "add").s(x, 1), _of(self, "add").s(100)))

def to_chord(self, x):
    add = _of(self, "add")
    return self.replace(chord([add.s(x, 1), add.s(x, 2)], _of(self, "tsum").s()))

def to_group(self, x):
    return self.replace(group(_of(self, "add").s(x, 1), _of(self, "add").s(x, 2)))

def to_stock(self, x):
    return self.replace(app.tasks["myproj.stock.add"].s(x, 1))

@app.task(name="myproj.routed.stalls", bind=True,
          kernel_options={"lease": "5s", "max_lost_leases": 2})
def stalls(self, x):
    return self.replace(app.tasks["myproj.routed.add"].s(x, 10))

@signals.task_postrun.connect
def stall_once(sender=None, state=None, **kwargs):
    # After the body replaced itself, before the worker's settle: the first time, stall
    # here until the test kills the worker.
    if sender.name != "myproj.routed.stalls" or os.path.exists("stalled.once"):
        return
    open("stalled.once", "w").close()
    with open("ledger.jsonl", "a") as ledger:
        ledger.write(json.dumps({"task": "stalls", "state": state, "ppid": os.getppid()}) + "\\n")
    time.sleep(60)

for side in ("routed", "stock"):
    for body in (add, tsum):
        app.task(name=f"myproj.{side}.{body.__name__}", shared=False)(body)
    for body in (replaced, nested, to_chain, to_chord, to_group, to_stock):
        app.task(name=f"myproj.{side}.{body.__name__}", shared=False, bind=True)(body)
"""

SIDE_BY_SIDE = """\
import json
from celery import chain, chord, group
from myproj import app
app.loader.import_default_modules()

out = {}
for side in ("routed", "stock"):
    def task(name):
        return app.tasks[f"myproj.{side}.{name}"]
    add, tsum, replaced = task("add"), task("tsum"), task("replaced")
    unrouted = task("to_stock").delay(1)
    unrouted.get(timeout=60, propagate=False)
    out[side] = {
        "simple": replaced.delay(1).get(timeout=60),
        "nested": task("nested").delay(3).get(timeout=60),
        "chain_step": chain(add.s(1, 1), replaced.s(), add.s(100)).apply_async().get(
            timeout=60
        ),
        "chord_member": chord([add.s(1, 1), replaced.s(5)])(tsum.s()).get(timeout=60),
        "to_chain": task("to_chain").delay(1).get(timeout=60),
        "to_chord": task("to_chord").delay(1).get(timeout=60),
        "to_group": task("to_group").delay(1).get(timeout=60),
        "group_of_groups": group([task("to_group").s(1), task("to_group").s(3)] * 3).delay().get(
            timeout=60
        ),
        "to_stock": [unrouted.status, str(unrouted.result)],
    }
print(json.dumps(out))
"""


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_a_routed_replace_answers_as_stock_celery_each_replacement_an_occurrence(
    stack: Stack,
) -> None:
    project, _ = Project.running(stack, TASKS, concurrency=2)

    out = project.client(SIDE_BY_SIDE)
    routed, stock = out["routed"], out["stock"]
    expected = {
        "simple": 11, "nested": [0, 1, 2, 3], "chain_step": 112, "chord_member": 17,
        "to_chain": 102, "to_chord": 5, "to_group": [2, 3],
        "group_of_groups": [[2, 3], [4, 5]] * 3,
    }  # fmt: skip
    assert {name: stock[name] for name in expected} == expected
    assert {name: routed[name] for name in expected} == expected
    assert stock["to_stock"] == ["SUCCESS", "2"]
    assert routed["to_stock"][0] == "FAILURE" and "myproj.stock.add" in routed["to_stock"][1]
    # Each replaced run ended without a result; its replacement is an occurrence that
    # took over its task id, made once by its settle.
    for name in ("replaced", "nested", "to_chain", "to_chord"):
        runs = stack.occurrences(f"task:myproj.routed.{name}")
        firsts = [o for o in runs if not o.trigger_key.startswith("replacing:")]
        assert firsts and all(o.status.value == "succeeded" for o in firsts), name
        assert all(o.result is None for o in firsts if name != "nested"), name
    nested = stack.occurrences("task:myproj.routed.nested")
    assert [o.trigger_key.split(":")[1] for o in nested[1:]] == ["1", "2", "3"]
    assert nested[-1].result == [0, 1, 2, 3]
    adds = stack.occurrences("task:myproj.routed.add")
    taking = sorted(o.result for o in adds if o.trigger_key.startswith("replacing:"))
    # simple, the chain's step, the chord's member, and to_chain's last step.
    assert taking == [11, 12, 15, 102]
    story = stack.cli("why", str(stack.occurrences("task:myproj.routed.replaced")[0].id))
    assert "replaced by occurrence" in str(story)


STALLS = """\
import json
from myproj import app
app.loader.import_default_modules()
print(json.dumps({"id": app.tasks["myproj.routed.stalls"].delay(1).id}))
"""

READ = """\
import json, sys
from myproj import app
print(json.dumps({"value": app.AsyncResult(sys.argv[1]).get(timeout=90)}))
"""


@pytest.mark.parametrize("stack", ["redis", "redis+postgres"], indirect=True)
def test_a_worker_killed_after_the_body_replaced_itself_makes_the_replacement_once(
    stack: Stack,
) -> None:
    project, [first] = Project.running(stack, TASKS)

    task_id = project.client(STALLS)["id"]
    [stalled] = stack.wait(
        lambda: project.ledger(task="stalls"), timeout=30, what="the body replaced itself"
    )
    assert stalled["state"] == "IGNORED"  # Celery's state of a replaced task
    assert stack.occurrences("task:myproj.routed.add") == []  # its settle never committed
    first.crash()
    project.worker("w2")
    answer = project.client(READ.replace("sys.argv[1]", repr(task_id)))
    assert answer == {"value": 11}
    [replaced] = stack.occurrences("task:myproj.routed.stalls")
    assert (replaced.status.value, replaced.attempt, replaced.result) == ("succeeded", 1, None)
    [replacement] = stack.occurrences("task:myproj.routed.add")
    assert replacement.trigger_key == f"replacing:1:{replaced.id}:{task_id}"
    assert replacement.status.value == "succeeded" and replacement.result == 11
