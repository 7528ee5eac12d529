"""Issue 40's canvas features as users combine them, on Redis and PostgreSQL, with the
kernel busy around them: retention pruning every second, two Beats, a Beat entry of a
routed task with an overlap policy, the chains' steps under ``overlap: queue`` (one at a
time), and workers SIGKILLed mid-member.

* A stamped chord whose members are chains, its body with an errback: one member's worker
  is killed while it runs a chain's last step (its task ``overlap: queue``: the others wait
  for it); another worker runs it again and the body runs once with every chain's end in
  group order, though retention ran while it waited (it keeps a chord's members until the
  body is made). Beside it a stamped chord one of
  whose chains dies with its worker on its last attempt: the body's errback runs once,
  the body never. What each body, step and errback saw of its stamps is what the same
  canvases of stock tasks saw (their failing step raising instead of dying: stock Celery
  never finishes a chord whose member's worker was killed).
* A growing chord (a generator's header) whose caller is SIGKILLed mid-generator: ``kernel
  why --json`` on a member says ``growing``, and retention keeps the members it made.
* Meanwhile the entry ``tick`` (``overlap: skip``), fired by two Beats, never runs twice
  at once.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
from integration.stack import Proc, Stack
from integration.test_enqueue import Project
from integration.test_options_combined import SETTINGS

from kernel import Event

pytestmark = pytest.mark.long

TASKS = """\
import json, os, time
from myproj import app

def note(self, **fields):
    stamps = [sorted(self.request.stamped_headers or []), self.request.stamps]
    side = self.name.split(".")[1]
    with open("ledger.jsonl", "a") as ledger:
        ledger.write(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "t": time.time(),
                                 "side": side, "stamps": stamps, **fields}) + "\\n")

def add(self, x, y):
    return x + y

def slow(self, x):
    note(self, task="slow", event="start", x=x)
    time.sleep(1.5)
    note(self, task="slow", event="done", x=x)
    return x

def tsum(self, values):
    note(self, task="tsum", values=values)
    return sum(values)

def on_err(self, task_id):
    note(self, task="on_err", failed=task_id)

def boom(self, x):
    note(self, task="fails", x=x)
    raise KeyError(x)

def noted(self, i):
    note(self, task="noted", i=i)
    return i

for side in ("routed", "stock"):
    for body in (add, tsum, on_err, boom, noted):
        app.task(name=f"myproj.{side}.{body.__name__}", shared=False, bind=True)(body)
    app.task(name=f"myproj.{side}.slow", shared=False, bind=True,
             kernel_options={"lease": "5s", "overlap": "queue"})(slow)

@app.task(name="myproj.routed.dies", bind=True,
          kernel_options={"lease": "5s", "max_attempts": 1, "max_lost_leases": 0})
def dies(self, x):
    note(self, task="fails", x=x)
    time.sleep(60)

@app.task(name="myproj.routed.tick", bind=True)
def tick(self):
    note(self, task="tick", event="start", id=self.request.id)
    time.sleep(2.5)
    note(self, task="tick", event="end", id=self.request.id)
"""

#: Both chords on one side (``SIDE``); the failing chain's second step is ``FAILS``.
CHORDS = """\
import json
from celery import chain, chord
from celery.canvas import StampingVisitor
from myproj import app
app.loader.import_default_modules()

class Stamp(StampingVisitor):
    def on_signature(self, sig, **headers):
        return {"stamp": 42}

t = lambda name: app.tasks[f"myproj.SIDE.{name}"]
fine = chord([chain(t("add").s(i, i), t("slow").s()) for i in range(6)],
             t("tsum").s().on_error(t("on_err").s()))
fine.stamp(visitor=Stamp())
made = fine.apply_async()
failing = chord([chain(t("add").s(1, 1), app.tasks["FAILS"].s()), t("add").s(2, 2)],
                t("tsum").s().on_error(t("on_err").s()))
failing.stamp(visitor=Stamp())
failed = failing.apply_async()
print(json.dumps({"fine": made.id, "failed": failed.id}))
"""

READ = """\
import json
from myproj import app
out = {}
for name, task_id in IDS.items():
    value = app.AsyncResult(task_id).get(timeout=120, propagate=False, follow_parents=False)
    out[name] = type(value).__name__ if isinstance(value, BaseException) else value
print(json.dumps(out))
"""

#: A caller that yields three members of a chord, then waits forever for its fourth.
GROWING = """\
import time
from celery import chord
from myproj import app
app.loader.import_default_modules()
noted, tsum = app.tasks["myproj.routed.noted"], app.tasks["myproj.routed.tsum"]

def header():
    for i in range(3):
        yield noted.s(i)
    open("caller-waits", "w").close()
    time.sleep(600)
    yield noted.s(3)

chord(header(), tsum.s())()
"""


def _chords(project: Project, side: str) -> dict[str, str]:
    fails = "myproj.stock.boom" if side == "stock" else "myproj.routed.dies"
    return project.client(CHORDS.replace("SIDE", side).replace("FAILS", fails))  # type: ignore[no-any-return]


def _read(project: Project, ids: dict[str, str]) -> dict[str, Any]:
    return project.client(READ.replace("IDS", repr(ids)))  # type: ignore[no-any-return]


def _seen(project: Project, side: str) -> dict[str, Any]:
    """What each kind of run of ``side``'s chords saw: its stamps, distinct; the bodies'
    values; the errbacks' failed task ids."""
    lines = project.ledger(side=side)
    stamps: dict[str, list[Any]] = {}
    for line in lines:
        if line["task"] in ("slow", "tsum", "on_err", "fails"):
            found = stamps.setdefault(line["task"], [])
            if line["stamps"] not in found:
                found.append(line["stamps"])
    return {
        "stamps": stamps,
        "sums": [x["values"] for x in lines if x["task"] == "tsum"],
        "errbacks": [x["failed"] for x in lines if x["task"] == "on_err"],
    }


def _pruned_after(stack: Stack, settled_ms: float) -> Event | None:
    """The first retention pass pruning what settled before ``settled_ms`` or later."""
    passes = stack.kernel.events(types=["history_pruned"], limit=1000)
    return next((e for e in passes if e.data["settled_before"] > settled_ms), None)


@pytest.mark.parametrize("stack", ["redis+postgres"], indirect=True)
def test_stamped_chords_of_chains_survive_killed_members_beside_pruning_and_two_beats(
    stack: Stack,
) -> None:
    project, workers = Project.running(stack, TASKS, settings=SETTINGS, workers=("w1", "w2", "w3"))
    project.start("beat-2", "beat", "-s", str(stack.root / "beat-schedule-2"), "-l", "INFO")
    stack.wait(lambda: len(stack.kernel.beats()) == 2, timeout=60, what="both Beats ticking")

    # Stock Celery's answer, nothing killed.
    stock_ids = _chords(project, "stock")
    assert _read(project, stock_ids) == {"fine": 30, "failed": "ChordError"}
    stack.wait(lambda: _seen(project, "stock")["errbacks"], timeout=60, what="stock's errback")

    routed_ids = _chords(project, "routed")

    def running() -> list[dict[str, Any]]:
        started = project.ledger(side="routed", task="slow", event="start")
        done = {
            (x["pid"], x["x"]) for x in project.ledger(side="routed", task="slow", event="done")
        }
        return [x for x in started if (x["pid"], x["x"]) not in done]

    # overlap: queue on the steps' task: one runs at a time.
    [killed] = stack.wait(running, timeout=60, what="a chain's step running")
    [victim] = [w for w in workers if w.pid == killed["ppid"]]
    assert killed["pid"] in victim.crash()
    [dying] = stack.wait(
        lambda: project.ledger(side="routed", task="fails"), timeout=60, what="dies started"
    )
    [holder] = [w for w in workers if w.pid == dying["ppid"]]
    if holder is not victim:
        holder.crash()  # on its only attempt: Beat's lease expiry dead-letters it
    project.worker("w4")

    assert _read(project, routed_ids) == {"fine": 30, "failed": "ChordError"}
    stack.wait(lambda: _seen(project, "routed")["errbacks"], timeout=60, what="routed errback")
    stock, routed = _seen(project, "stock"), _seen(project, "routed")
    # The body once, every chain's end in its place; the errback once, given the failed
    # chord's body id; the failed chord's body never.
    assert stock["sums"] == routed["sums"] == [[0, 2, 4, 6, 8, 10]]
    assert (stock["errbacks"], routed["errbacks"]) == (
        [stock_ids["failed"]],
        [routed_ids["failed"]],
    )
    assert routed["stamps"] == stock["stamps"], (routed, stock)
    assert stock["stamps"]["tsum"] == [[["stamp"], {"stamp": 42}]]
    # The killed step ran again elsewhere; the steps ran one at a time, in turn.
    steps = [x for x in project.ledger(side="routed", task="slow") if x != killed]
    assert len(steps) == 12
    for start, done in zip(steps[::2], steps[1::2], strict=True):
        assert (start["event"], done["event"], start["x"]) == ("start", "done", done["x"])
    # Retention ran while the chord waited for its killed step (a 5 s lease) and kept its
    # members (one pruned would have given the body None, and sum() a TypeError): a pass
    # that would have pruned the first chain's end came before the body ran.
    first_end = min(x["t"] for x in project.ledger(side="routed", task="slow", event="done"))
    [body_ran] = project.ledger(side="routed", task="tsum")
    passed = _pruned_after(stack, first_end * 1000 + 1000)
    assert passed is not None and passed.at.timestamp() < body_ran["t"]

    # overlap: skip, two Beats: never two ticks at once.
    ran = [x["event"] for x in project.ledger(task="tick")]
    assert ran[: len(ran) // 2 * 2] == ["start", "end"] * (len(ran) // 2), ran


@pytest.mark.parametrize("stack", ["redis+postgres"], indirect=True)
def test_a_growing_chord_whose_caller_is_killed_stays_growing_and_keeps_its_members(
    stack: Stack,
) -> None:
    project, _ = Project.running(stack, TASKS, settings=SETTINGS, workers=("w1", "w2"))
    project.start("beat-2", "beat", "-s", str(stack.root / "beat-schedule-2"), "-l", "INFO")
    caller = Proc("caller", [sys.executable, "-c", GROWING], cwd=stack.root, env=project.env)
    stack.procs.append(caller)
    stack.wait(lambda: (stack.root / "caller-waits").exists(), timeout=60, what="the caller waits")
    # Celery reads one member ahead: the first two are made, the third waits with the caller.
    members = stack.wait(
        lambda: (found := stack.occurrences("task:myproj.routed.noted")) and len(found) >= 2
        and all(o.status.value == "succeeded" for o in found) and found,
        timeout=60, what="the members made so far ran",
    )  # fmt: skip
    caller.crash()
    last_settled = max(o.settled_at.timestamp() for o in members if o.settled_at)
    stack.wait(
        lambda: _pruned_after(stack, last_settled * 1000 + 1),
        timeout=60, what="a retention pass past the members' settles",
    )  # fmt: skip
    why = stack.cli("why", str(members[0].id))
    assert why["canvas"]["chord"]["state"] == "growing", why
    assert "its caller is still adding members" in why["canvas"]["waits_for"]
    # Retention kept them: the body, once the chord closes, reads their results.
    assert [stack.occurrence(o.id).result for o in members] == [o.result for o in members]
    assert stack.occurrences("task:myproj.routed.tsum") == []
