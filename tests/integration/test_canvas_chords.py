"""Groups and chords end to end (issue 40): routed through the kernel on real workers,
measured against stock Celery on the same Redis (broker and result backend).

* ``chord([add.s(i, i) for i in range(10)])(tsum.s()).get()`` and
  ``group(add.s(i, i) ...).delay().get()`` with ``add`` and ``tsum`` routed answer what
  the same canvas of stock tasks answers, on a worker of two processes; so does a chord
  with a failing member (``ChordError``, the body's errback once, the body never);
* a chord of 20 members on three workers, one SIGKILLed while it runs a member: the
  member's lease expires, another worker runs it again (at least once), and the body
  runs once, with every member's result in group order (SQLite, and PostgreSQL where
  the members' settles meet on the chord's row from several workers);
* a member whose worker is SIGKILLed on its last attempt fails the chord: the body's
  result is FAILURE with ``ChordError`` (written with the member's owed end), its
  errback runs once, the body never;
* a chord whose body is a chain (one with a chord among its steps too) answers what stock
  Celery answers, each step made once; a failing member fails it under the chain's id;
* ``task.map``, ``task.starmap``, ``task.chunks``, a chain whose steps carry their own
  ``countdown``/``eta``, a chain with a chord as a step (in the middle, and last as a
  group followed by a task), a chain whose last step is a group (one of its members a
  chain), a chord whose body is a chord (in a chain as ``group | group | task``, and
  applied), a group whose members are chains and ``self.replace(sig)`` (returned or
  raised, and in a chain) answer what stock Celery answers, each routed one an occurrence
  (a replacement too).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from integration.stack import Stack
from integration.test_enqueue import ROUTED_AND_STOCK, Project

pytestmark = pytest.mark.long

TASKS = """\
import json, os, time
from myproj import app

def note(**fields):
    with open("ledger.jsonl", "a") as ledger:
        ledger.write(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), **fields}) + "\\n")

def add(x, y):
    return x + y

def tsum(values):
    note(task="tsum", values=values)
    return sum(values)

def boom(x):
    raise KeyError(x)

def on_err(task_id):
    note(task="on_err", failed=task_id)

def slow_add(x, y):
    note(task="slow_add", event="start", x=x)
    time.sleep(1.5)
    note(task="slow_add", event="done", x=x)
    return x + y

def replaced(self, x):
    return self.replace(app.tasks[self.name.replace("replaced", "add")].s(x, 10))

def raised(self, x):
    raise self.replace(app.tasks[self.name.replace("raised", "add")].s(x, 20))

for side in ("routed", "stock"):
    for body in (add, tsum, boom, on_err):
        app.task(name=f"myproj.{side}.{body.__name__}", shared=False)(body)
    for body in (replaced, raised):
        app.task(name=f"myproj.{side}.{body.__name__}", shared=False, bind=True)(body)
app.task(name="myproj.routed.slow_add", kernel_options={"lease": "5s"})(slow_add)

@app.task(name="myproj.routed.dies", kernel_options={"lease": "5s", "max_attempts": 1,
                                                     "max_lost_leases": 0})
def dies(x):
    note(task="dies", x=x)
    time.sleep(60)
"""

SIDE_BY_SIDE = """\
import json
from celery import chord, group
from myproj import app
app.loader.import_default_modules()

out = {}
for side in ("routed", "stock"):
    add, tsum = app.tasks[f"myproj.{side}.add"], app.tasks[f"myproj.{side}.tsum"]
    made = chord([add.s(i, i) for i in range(10)])(tsum.s())
    out[side] = {
        "chord": made.get(timeout=60),
        "chord_type": type(made).__name__,
        "header": [r.id for r in made.parent.results],
        "group": group(add.s(i, 1) for i in range(5)).delay().get(timeout=60),
    }
    boom, on_err = app.tasks[f"myproj.{side}.boom"], app.tasks[f"myproj.{side}.on_err"]
    failing = chord([add.s(1, 1), boom.s(7)])(tsum.s().on_error(on_err.s()))
    try:
        failing.get(timeout=60)  # follows its parent: the member's own error first
    except Exception as exc:
        raised = type(exc).__name__
    value = failing.get(timeout=60, propagate=False, follow_parents=False)
    out[side]["failed"] = {"raised": raised, "value": type(value).__name__,
                           "status": failing.status, "body": failing.id}
print(json.dumps(out))
"""

KILLED = """\
import json
from celery import chord
from myproj import app
app.loader.import_default_modules()
add, tsum = app.tasks["myproj.routed.slow_add"], app.tasks["myproj.routed.tsum"]
made = chord([add.s(i, i) for i in range(20)])(tsum.s())
print(json.dumps({"body": made.id}))
"""

DIES = """\
import json
from celery import chord
from myproj import app
app.loader.import_default_modules()
add, dies = app.tasks["myproj.routed.add"], app.tasks["myproj.routed.dies"]
tsum, on_err = app.tasks["myproj.routed.tsum"], app.tasks["myproj.routed.on_err"]
made = chord([add.s(1, 1), dies.s(2)])(tsum.s().on_error(on_err.s()))
print(json.dumps({"body": made.id}))
"""

MAPS = """\
import json
from datetime import datetime, timedelta, timezone
from celery import chain, chord, group
from myproj import app
app.loader.import_default_modules()

out = {}
for side in ("routed", "stock"):
    add, tsum = app.tasks[f"myproj.{side}.add"], app.tasks[f"myproj.{side}.tsum"]
    soon = datetime.now(timezone.utc) + timedelta(seconds=2)
    stepped = chain(add.s(1, 1), add.s(3).set(countdown=1), add.s(5).set(eta=soon))
    out[side] = {
        "map": tsum.map([[1, 2], [3, 4]]).delay().get(timeout=60),
        "starmap": add.starmap([(1, 2), (3, 4)]).delay().get(timeout=60),
        "chunks": add.chunks([(i, i) for i in range(5)], 2).delay().get(timeout=60),
        "chain": stepped.apply_async().get(timeout=60),
        "chord_step": chain(
            add.s(1, 1), chord([add.s(1), add.s(2)], tsum.s()), add.s(100)
        ).apply_async().get(timeout=60),
        "chord_last": chain(add.s(1, 1), group(add.s(1), add.s(2)), tsum.s()).apply_async().get(
            timeout=60
        ),
        "group_last": chain(add.s(1, 1), group(add.s(1), add.s(2))).apply_async().get(
            timeout=60
        ),
        "group_chain_last": chain(
            add.s(1, 1), group(add.s(1), chain(add.s(2), add.s(3)))
        ).apply_async().get(timeout=60),
        "chord_of_chords": chain(
            add.s(1, 1), group(add.s(1), add.s(2)), group(tsum.s(), tsum.s()), tsum.s()
        ).apply_async().get(timeout=60),
        "chord_body_chord": chord(
            [add.s(1, 1)], chord([tsum.s(), tsum.s()], tsum.s())
        ).apply_async().get(timeout=60),
        "group_of_chains": group(
            chain(add.s(1, 1), add.s(1)), add.s(5, 5), chain(add.s(2, 2), add.s(2), add.s(2))
        ).delay().get(timeout=60),
        "group_of_a_chain_to_a_group": group(
            add.s(1, 2) | group(add.s(1), add.s(2))
        ).delay().get(timeout=60),
        "group_with_empty_chains": group(
            chain(), add.s(1, 2), chain(), add.s(3, 4)
        ).apply_async().get(timeout=60),
    }
    replaced, raised = app.tasks[f"myproj.{side}.replaced"], app.tasks[f"myproj.{side}.raised"]
    out[side]["replace"] = [
        replaced.delay(1).get(timeout=60),
        raised.delay(2).get(timeout=60),
        chain(replaced.s(3), add.s(100)).apply_async().get(timeout=60),
    ]
print(json.dumps(out))
"""

CHAIN_BODY = """\
import json
from celery import chain, chord
from myproj import app
app.loader.import_default_modules()

out = {}
for side in ("routed", "stock"):
    add, tsum = app.tasks[f"myproj.{side}.add"], app.tasks[f"myproj.{side}.tsum"]
    boom, on_err = app.tasks[f"myproj.{side}.boom"], app.tasks[f"myproj.{side}.on_err"]
    header = [add.s(1, 1), add.s(2, 2)]
    made = chord(header)(chain(tsum.s(), add.s(10), add.s(100)))
    chorded = chord(header)(chain(tsum.s(), chord([add.s(1), add.s(2)], tsum.s()), add.s(100)))
    failing = chord([add.s(1, 1), boom.s(7)])(chain(tsum.s(), add.s(1)).on_error(on_err.s()))
    value = failing.get(timeout=60, propagate=False, follow_parents=False)
    out[side] = {
        "chain": made.get(timeout=60), "parent": made.parent.get(timeout=60),
        "chord_in_chain": chorded.get(timeout=60),
        "failed": {"value": type(value).__name__, "status": failing.status, "body": failing.id},
    }
print(json.dumps(out))
"""

HINT = """\
import json
from myproj import app
app.send_task("kernel.run_occurrence", args=[sys.argv[1]], queue="celery")
print(json.dumps({}))
"""

READ_BODY = """\
import json, sys
from myproj import app
body = app.AsyncResult(sys.argv[1])
value = body.get(timeout=90, propagate=False, follow_parents=False)
print(json.dumps({"value": type(value).__name__, "status": body.status}))
"""


def _each_side_s_errback_ran_once(project: Project, *sides: dict[str, Any]) -> None:
    """The failed chord's errback ran on each side, given that side's body id."""

    def all_errbacks() -> list[dict[str, str]] | None:
        ran = project.ledger(task="on_err")
        return ran if len(ran) >= len(sides) else None

    errbacks = project.stack.wait(all_errbacks, timeout=60, what="each side's errback ran")
    assert sorted(x["failed"] for x in errbacks) == sorted(side["failed"]["body"] for side in sides)


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_a_routed_chord_and_group_answer_as_stock_celery(stack: Stack) -> None:
    project, _ = Project.running(stack, TASKS, concurrency=2)

    out = project.client(SIDE_BY_SIDE)
    routed, stock = out["routed"], out["stock"]
    assert stock["chord"] == 90 and stock["group"] == [1, 2, 3, 4, 5]
    assert routed["chord"] == stock["chord"] and routed["group"] == stock["group"]
    assert routed["chord_type"] == stock["chord_type"] == "AsyncResult"
    # A member that fails fails the chord as Celery fails it: .get() raises the member's
    # error, the body's own result is FAILURE with ChordError, the body never runs, its
    # errback runs once with the body's task id.
    for side in (routed, stock):
        failed = side["failed"]
        assert (failed["raised"], failed["value"], failed["status"]) == (
            "KeyError",
            "ChordError",
            "FAILURE",
        )
    _each_side_s_errback_ran_once(project, routed, stock)
    # Through the kernel: each member an occurrence keyed by its Celery task id, the
    # body one, made by the last member's settle.
    members = {o.trigger_key for o in stack.occurrences("task:myproj.routed.add")}
    assert {f"key:{i}" for i in routed["header"]} <= members
    [body] = stack.occurrences("task:myproj.routed.tsum")  # the failed chord's: never made
    assert body.payload["args"] == [[2 * i for i in range(10)]]
    assert body.status.value == "succeeded"


@pytest.mark.parametrize("stack", ["redis", "redis+postgres"], indirect=True)
def test_a_chord_whose_member_s_worker_is_killed_runs_its_body_once(stack: Stack) -> None:
    project, workers = Project.running(stack, TASKS, workers=("w1", "w2", "w3"))

    body_id = project.client(KILLED)["body"]
    victim = workers[0]

    def running_on_victim() -> list[int]:
        started = project.ledger(task="slow_add", event="start", ppid=victim.popen.pid)
        done = {(x["pid"], x["x"]) for x in project.ledger(task="slow_add", event="done")}
        return [x["pid"] for x in started if (x["pid"], x["x"]) not in done]

    [member_pid] = stack.wait(running_on_victim, timeout=60, what="w1 running a member")
    killed = victim.crash()
    assert member_pid in killed
    body = stack.wait(
        lambda: [o for o in stack.occurrences("task:myproj.routed.tsum")
                 if o.status.value == "succeeded"],
        timeout=120,
        what="the chord's body ran",
    )  # fmt: skip
    assert [o.trigger_key for o in body] == [f"key:{body_id}"]
    [ran] = project.ledger(task="tsum")
    assert ran["values"] == [2 * i for i in range(20)]
    members = stack.occurrences("task:myproj.routed.slow_add")
    assert len(members) == 20 and {o.status.value for o in members} == {"succeeded"}
    # The killed member ran again elsewhere (at least once): more starts than members.
    assert len(project.ledger(task="slow_add", event="start")) > 20


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_a_member_killed_on_its_last_attempt_fails_the_chord_in_the_backend(
    stack: Stack,
) -> None:
    project, [first] = Project.running(stack, TASKS)

    body_id = project.client(DIES)["body"]
    stack.wait(lambda: project.ledger(task="dies"), timeout=30, what="the member started")
    first.crash()  # SIGKILL on its only attempt: Beat's lease expiry dead-letters it
    project.worker("w2")
    # The end no worker answered is owed to the backend; its delivery writes the body's
    # ChordError too, as Celery's backend does when a member fails (stock Celery never
    # finishes a chord whose member's worker was killed).
    read = READ_BODY.replace("sys.argv[1]", repr(body_id))
    assert project.client(read) == {"value": "ChordError", "status": "FAILURE"}
    errback = stack.wait(
        lambda: project.ledger(task="on_err"), timeout=60, what="the body's errback ran"
    )
    assert [x["failed"] for x in errback] == [body_id]
    assert stack.occurrences("task:myproj.routed.tsum") == []
    assert project.ledger(task="tsum") == []


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_a_killed_members_lease_expired_by_a_claim_still_fails_the_chord_in_the_backend(
    stack: Stack,
) -> None:
    # No Beat: the claim of a hint arriving after the killed member's lease expired
    # dead-letters it (as Beat's expiry would, and as happens when a redelivered hint beats
    # Beat to it), and the refused claimant hints the end it owes the backend at once.
    project = Project(stack, settings=ROUTED_AND_STOCK, tasks=TASKS)
    first = project.worker("w1")
    body_id = project.client(DIES)["body"]
    stack.wait(lambda: project.ledger(task="dies"), timeout=30, what="the member started")
    first.crash()
    [member] = stack.occurrences("task:myproj.routed.dies")
    assert member.lease_expires_at is not None
    expiry = member.lease_expires_at.timestamp()
    stack.wait(lambda: time.time() > expiry + 0.5, timeout=120, what="the lease expired")
    project.worker("w2")
    project.client(HINT.replace("sys.argv[1]", str(member.id)))
    read = READ_BODY.replace("sys.argv[1]", repr(body_id))
    assert project.client(read) == {"value": "ChordError", "status": "FAILURE"}
    assert stack.occurrences("task:myproj.routed.dies")[0].status.value == "dead_letter"


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_maps_timed_steps_chord_steps_and_replace_answer_as_stock_celery(stack: Stack) -> None:
    project, _ = Project.running(stack, TASKS, concurrency=2)

    out = project.client(MAPS)
    assert out["stock"] == {
        "map": [3, 7], "starmap": [3, 7], "chunks": [[0, 2], [4, 6], [8]], "chain": 10,
        "chord_step": 107, "chord_last": 7, "replace": [11, 22, 113],
        "group_last": [3, 4], "group_chain_last": [3, 7], "chord_of_chords": 14,
        "chord_body_chord": 4, "group_of_chains": [3, 10, 8],
        "group_of_a_chain_to_a_group": [4, 5], "group_with_empty_chains": [3, 7],
    }  # fmt: skip
    assert out["routed"] == out["stock"]
    builtins = {o.payload["task"] for o in stack.occurrences("task:celery.map")} | {
        o.payload["task"] for o in stack.occurrences("task:celery.starmap")
    }
    assert builtins == {"celery.map", "celery.starmap"}
    assert len(stack.occurrences("task:celery.starmap")) == 4  # starmap + 3 chunks
    steps = stack.occurrences("task:myproj.routed.add")
    # The timed chain's three steps, each chord chain's first step, members and last, the
    # step after a replaced run, made by its settle with the replacement's result, and
    # each group-last chain's first step and members (a chain member's two steps), the
    # chord-of-chords chain's first step and first chord's members, the chord whose body
    # is a chord: its member, and the group of chains' steps and member; and three
    # replacements (made by the replaced runs' settles: tests/integration/
    # test_canvas_replace.py).
    assert sorted(o.result for o in steps) == sorted(
        [2, 2, 2, 3, 3, 4, 4, 5, 10, 107, 113, 2, 3, 4, 2, 3, 4, 7, 2, 3, 4, 2]
        + [2, 3, 10, 4, 6, 8]
        + [3, 4, 5]
        + [3, 7]
        + [11, 13, 22]
    )
    # A replaced run ends without a result, whether the body returns or raises
    # self.replace(...): the caller's result is its replacement's.
    replaced = stack.occurrences("task:myproj.routed.replaced")
    raised = stack.occurrences("task:myproj.routed.raised")
    assert [o.result for o in replaced + raised] == [None, None, None]


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_a_chord_whose_body_is_a_chain_answers_as_stock_celery(stack: Stack) -> None:
    project, _ = Project.running(stack, TASKS, concurrency=2)

    out = project.client(CHAIN_BODY)
    routed, stock = out["routed"], out["stock"]
    assert (stock["chain"], stock["parent"], stock["chord_in_chain"]) == (116, [2, 4], 115)
    assert {**routed, "failed": None} == {**stock, "failed": None}
    # The failure is under the id the caller holds (the chain's last step's), as stock's.
    for side in (routed, stock):
        assert (side["failed"]["value"], side["failed"]["status"]) == ("ChordError", "FAILURE")
    _each_side_s_errback_ran_once(project, routed, stock)
    # Through the kernel, each step once: the two chords' tsum bodies and their inner
    # chord's, and the adds after them; the failed chord's chain never made.
    sums = sorted(o.result for o in stack.occurrences("task:myproj.routed.tsum"))
    assert sums == [6, 6, 15]
