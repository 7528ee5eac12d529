"""A chord as a chord's member, a group's member led by a chord, a chord member's chain
ending in a group (issue 40): routed through the kernel on a real worker and measured
against stock Celery on the same app and Redis (broker and result backend).

* ``chord([chord([a, b], tsum), c], identity)``: the inner chord counts as its body, the
  outer body gets the inner body's result in its place, as stock's;
* ``group(chord(...), c)``: the group's result is the chord body's;
* a generator header yielding a chord: counted in as it is yielded;
* ``chord([chain(a, group(b, c)), d], identity)``: the group's results one list in the
  chain's place (Celery's ``[[42, 42]]``);
* four chords deep (Celery's test_nested_chord's third canvas);
* an inner chord whose member fails: the errback both chords carry (Celery links a
  chord's errback to a chord in its header too) runs once on each side, the bodies never;
  through the kernel the outer chord fails too (its body's result FAILURE), where stock
  leaves it waiting.

Through the kernel each body is one occurrence, made by the settle that completed its chord.
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
        ledger.write(json.dumps({"pid": os.getpid(), **fields}) + "\\n")

def add(x, y):
    return x + y

def tsum(values):
    return sum(values)

def identity(x):
    note(task="identity", x=x)
    return x

def boom():
    raise KeyError("boom")

def on_err(side):
    note(task="on_err", side=side)

for side in ("routed", "stock"):
    for body in (add, tsum, identity, boom, on_err):
        app.task(name=f"myproj.{side}.{body.__name__}", shared=False)(body)
"""

SIDE_BY_SIDE = """\
import json, time
from celery import chain, chord, group
from myproj import app
app.loader.import_default_modules()

out = {}
for side in ("routed", "stock"):
    t = lambda name: app.tasks[f"myproj.{side}.{name}"]
    add, tsum, identity = t("add"), t("tsum"), t("identity")
    got = {}
    inner = chord([add.s(1, 2), add.s(3, 4)], tsum.s())
    got["chord_member"] = chord([inner, add.s(5, 6)], identity.s())().get(timeout=60)
    got["group_member"] = group([chord([add.s(1, 1), add.s(2, 2)], tsum.s()), add.s(3, 4)]
                                ).delay().get(timeout=60)
    lazy = (m for m in [add.s(0, 1), chord([add.s(1, 2), add.s(3, 4)], tsum.s())])
    got["generator"] = chord(lazy, identity.s())().get(timeout=60)
    ending = chain(add.s(1, 1), group(add.s(10), add.s(20)))
    got["chain_to_group"] = chord([ending, add.s(0, 0)], identity.s())().get(timeout=60)
    deep = group([group([group([group([add.s([1], [2])]) | add.s([3])]) | add.s([4])])
                  | add.s([5])]) | add.s([6])
    got["deep"] = deep().get(timeout=60)
    failing = chord([chord([add.si(1, 1), t("boom").si()], identity.si("inner body")),
                     add.si(2, 2)], identity.si("outer body"))
    failing.link_error(t("on_err").si(side))
    res = failing.delay()
    if side == "routed":  # stock leaves the outer chord waiting for its inner body
        res.get(timeout=60, propagate=False)
        got["outer_status"] = res.status
    out[side] = got
print(json.dumps(out))
"""


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_chords_in_chords_answer_as_stock_celery(stack: Stack) -> None:
    project, _ = Project.running(stack, TASKS, concurrency=2)

    out = project.client(SIDE_BY_SIDE)
    routed, stock = out["routed"], out["stock"]
    assert stock["chord_member"] == routed["chord_member"] == [10, 11]
    assert stock["group_member"] == routed["group_member"] == [6, 7]
    assert stock["generator"] == routed["generator"] == [1, 10]
    assert stock["chain_to_group"] == routed["chain_to_group"] == [[12, 22], 0]
    assert stock["deep"] == routed["deep"] == [[[[[1, 2], 3], 4], 5], 6]
    assert routed["outer_status"] == "FAILURE"

    def both_errbacks() -> list[dict[str, str]] | None:
        ran = project.ledger(task="on_err")
        return ran if len(ran) >= 2 else None

    errbacks = project.stack.wait(both_errbacks, timeout=60, what="each side's errback ran")
    assert sorted(x["side"] for x in errbacks) == ["routed", "stock"]
    bodies = [x["x"] for x in project.ledger(task="identity") if isinstance(x["x"], str)]
    assert bodies == []  # neither the inner body nor the outer one ran, on either side
    # Through the kernel: each body once, made by the settle that completed its chord.
    made = stack.occurrences("task:myproj.routed.tsum")
    assert len(made) == 3 and all(o.status.value == "succeeded" for o in made)
    completed = stack.kernel.events(types=["chord_completed"], limit=100)
    assert len({e.data["chord_id"] for e in completed}) == len(completed)
    # Once more, after the errbacks: still one each (stock's errback ran once too).
    assert len(project.ledger(task="on_err")) == 2
