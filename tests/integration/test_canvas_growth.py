"""A chord that grows (issue 40), routed through the kernel on a real worker and measured
against stock Celery on the same Redis (broker and result backend):

* a chord whose header is a generator dispatches each member as the generator yields it,
  as stock Celery does (Celery's test_chord::test_generator): the generator, before it
  yields its last member, sees its first member's run, then the chord answers the sum;
* ``self.add_to_chord(sig)`` inside a running member adds a member, counted into the
  chord (Celery's test_add_to_chord): the body gets every result; a chord added is
  counted by its body (Celery's test_add_chord_to_chord);
* an empty header's body runs at once with [] (``chord([], body)``, ``group([]) | body``,
  and a body replacing itself by an empty group), as stock Celery's does;
* a generator that raises gives the caller its error, as stock Celery does; through the
  kernel its chord is abandoned (failed once, its body never made).
"""

from __future__ import annotations

import pytest
from integration.stack import Stack
from integration.test_enqueue import Project

pytestmark = pytest.mark.long

TASKS = """\
import json, os, time
from celery import group
from myproj import app

def note(**fields):
    with open("ledger.jsonl", "a") as ledger:
        ledger.write(json.dumps({"pid": os.getpid(), "t": time.time(), **fields}) + "\\n")

def add(x, y):
    return x + y

def tsum(values):
    return sum(values)

def identity(x):
    return x

def noted(side, i):
    note(task="noted", side=side, i=i)
    return i

def adds_to_chord(self, nums, val):
    add = app.tasks[self.name.replace("adds_to_chord", "add")]
    for num in nums:
        self.add_to_chord(add.s(num, val))
    return 0

def add_to_all(self, nums, val):
    add = app.tasks[self.name.replace("add_to_all", "add")]
    raise self.replace(group(*[add.s(num, val) for num in nums]))

def adds_chord_to_chord(self, nums, val):
    add = app.tasks[self.name.replace("adds_chord_to_chord", "add")]
    tsum = app.tasks[self.name.replace("adds_chord_to_chord", "tsum")]
    self.add_to_chord(group(add.s(n, val) for n in nums) | tsum.s())
    return 0

for side in ("routed", "stock"):
    for body in (add, tsum, identity, noted):
        app.task(name=f"myproj.{side}.{body.__name__}", shared=False)(body)
    for body in (adds_to_chord, adds_chord_to_chord, add_to_all):
        app.task(name=f"myproj.{side}.{body.__name__}", shared=False, bind=True)(body)
"""

SIDE_BY_SIDE = """\
import json, time
from celery import chain, chord, group
from myproj import app
from myproj_tasks import note
app.loader.import_default_modules()

def ran(side, i):
    try:
        lines = [json.loads(x) for x in open("ledger.jsonl")]
    except FileNotFoundError:
        return False
    return any(x.get("task") == "noted" and x["side"] == side and x["i"] == i for x in lines)

def header(side, size):
    noted = app.tasks[f"myproj.{side}.noted"]
    for i in range(size):
        if i == size - 1:
            # Celery reads one member ahead: member 0 is dispatched once member 1 is
            # yielded. Wait for its run (bounded) before yielding the last.
            bound = time.monotonic() + 30
            while not ran(side, 0) and time.monotonic() < bound:
                time.sleep(0.1)
            note(task="last_yielded", side=side, first_ran=ran(side, 0))
        yield noted.s(side, i)

out = {}
for side in ("routed", "stock"):
    t = lambda name: app.tasks[f"myproj.{side}.{name}"]
    got = {"generator": chord(header(side, 4), t("tsum").s())().get(timeout=60)}
    got["add_to_chord"] = sorted(
        (group([t("adds_to_chord").s([1, 2, 3], 4)]) | t("identity").s())().get(timeout=60)
    )
    try:
        nested = group([t("adds_chord_to_chord").s([1, 2, 3], 4)]) | t("identity").s()
        got["add_chord_to_chord"] = sorted(nested().get(timeout=60))
    except Exception as exc:
        got["add_chord_to_chord"] = f"{type(exc).__name__}: {exc}"
    got["empty"] = chord([], body=t("tsum").s())().get(timeout=60)
    got["empty_group"] = (group([]) | t("identity").s())().get(timeout=60)
    # Empty chains in a header are no members (Celery's test_chord_header_with_empty_chains).
    got["empty_chains"] = [
        chord([chain()], body=t("tsum").s())().get(timeout=60),
        chord([chain(), t("add").s(1, 1), chain(), t("add").s(2, 2)], t("tsum").s())().get(
            timeout=60
        ),
    ]
    # Celery's test_empty_header_chord: the body replaces itself by an empty group.
    got["empty_replaced"] = chord([], body=t("add_to_all").s(9))().get(timeout=60)

    def raising(side):
        # Past the member Celery reads ahead: a lazy list that stops reading there drops
        # the error (stock Celery's _regen), whoever reads it.
        for i in (10, 11, 12):
            yield app.tasks[f"myproj.{side}.noted"].s(side, i)
        raise ValueError("the header gave up")

    try:
        chord(raising(side), t("tsum").s())()
        got["raising"] = "no error"
    except Exception as exc:
        got["raising"] = f"{type(exc).__name__}: {exc}"
    out[side] = got
print(json.dumps(out))
"""


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_a_growing_chord_answers_as_stock_celery(stack: Stack) -> None:
    project, _ = Project.running(stack, TASKS, concurrency=2)

    out = project.client(SIDE_BY_SIDE)
    routed, stock = out["routed"], out["stock"]
    assert stock["generator"] == routed["generator"] == 0 + 1 + 2 + 3
    # Both dispatched the first member before the generator yielded its last.
    assert {x["side"]: x["first_ran"] for x in project.ledger(task="last_yielded")} == {
        "routed": True,
        "stock": True,
    }
    assert stock["add_to_chord"] == routed["add_to_chord"] == [0, 5, 6, 7]
    # A chord added: its body counted in its place (test_chord_in_chord.py has the rest).
    assert stock["add_chord_to_chord"] == routed["add_chord_to_chord"] == [0, 18]
    assert stock["empty"] == routed["empty"] == 0
    assert stock["empty_group"] == routed["empty_group"] == []
    assert stock["empty_replaced"] == routed["empty_replaced"] == []
    assert stock["empty_chains"] == routed["empty_chains"] == [0, 6]
    # A generator that raises: the caller gets its error on both sides; through the
    # kernel the chord is abandoned (failed, its body never made).
    assert stock["raising"] == routed["raising"] == "ValueError: the header gave up"
    abandoned = [e.data for e in stack.kernel.events(types=["chord_failed"], limit=100)]
    assert [e["reason"] for e in abandoned] == ["abandoned"]
    # Through the kernel: each generator member an occurrence (the raising one's three
    # too), and the body one.
    noted = stack.occurrences("task:myproj.routed.noted")
    assert len(noted) == 4 + 3
    # The bodies: the generator's, the added chord's, the empty header's, the empty chains'.
    assert len(stack.occurrences("task:myproj.routed.tsum")) == 5
