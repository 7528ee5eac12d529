"""Nested canvas end to end (issue 40): routed through the kernel on a real worker,
measured against stock Celery on the same Redis (broker and result backend).

A chord's member that is a chain (applied, and in a chain as a chord step), one that is a
chain ending in a chord, a group among a chord's members (unrolled, as Celery does), a
group as a chord's body, groups of groups, and a chain (a chord's member, or alone)
failing before its end (its error under its last step's id) answer what the same canvas
of stock tasks answers;
through the kernel each chord's body is made once, by the end of its last member.
"""

from __future__ import annotations

import pytest
from integration.stack import Stack
from integration.test_canvas_chords import TASKS
from integration.test_enqueue import Project

pytestmark = pytest.mark.long

NESTED = """\
import json
from celery import chain, chord, group
from myproj import app
app.loader.import_default_modules()

out = {}
for side in ("routed", "stock"):
    add, tsum = app.tasks[f"myproj.{side}.add"], app.tasks[f"myproj.{side}.tsum"]
    boom, on_err = app.tasks[f"myproj.{side}.boom"], app.tasks[f"myproj.{side}.on_err"]
    applied = chord([add.s(1, 1), chain(add.s(2, 2), add.s(10), add.s(100))])(tsum.s())
    stepped = chain(
        add.si(1, 0),
        chord(
            [add.si(2, 0), chain(add.si(3, 0), chord([add.si(4, 0), add.si(5, 0)], tsum.s()))],
            tsum.s(),
        ),
    ).delay()
    unrolled = chord([group(add.s(1, 1), add.s(2, 2)), add.s(3, 3)])(tsum.s())
    grouped = chord([add.s(1, 1), add.s(2, 2)])(group(tsum.s(), tsum.s()))
    nested = group(add.s(1, 10), group(add.s(1, 100), group(add.s(1, 1000)))).delay()
    group_failed = chord([boom.s(3)])(group(tsum.s(), tsum.s()))
    failing = chord([chain(add.s(1, 1), boom.s(), add.s(5))])(tsum.s().on_error(on_err.s()))
    value = failing.get(timeout=60, propagate=False, follow_parents=False)
    try:  # follows its parent: the chain member's last step has the step's error
        failing.get(timeout=60)
    except Exception as exc:
        raised = type(exc).__name__
    broken = chain(add.s(1, 1), boom.s(), add.s(5)).delay()
    out[side] = {
        "applied": applied.get(timeout=60),
        "stepped": stepped.get(timeout=60),
        "unrolled": unrolled.get(timeout=60),
        "grouped": [grouped.get(timeout=60), type(grouped).__name__],
        "nested": nested.get(timeout=60),
        "group_failed": [type(v).__name__ for v in group_failed.get(timeout=60, propagate=False)],
        "failed": {"value": type(value).__name__, "status": failing.status, "body": failing.id},
        "raised": raised,
        "broken": type(broken.get(timeout=60, propagate=False)).__name__,
    }
print(json.dumps(out))
"""


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_a_chord_s_members_that_are_canvases_answer_as_stock_celery(stack: Stack) -> None:
    project, _ = Project.running(stack, TASKS, concurrency=2)

    out = project.client(NESTED)
    routed, stock = out["routed"], out["stock"]
    assert (stock["applied"], stock["stepped"], stock["unrolled"]) == (116, 11, 12)
    assert (stock["grouped"], stock["nested"]) == ([[6, 6], "GroupResult"], [11, 101, 1001])
    assert {**routed, "failed": None} == {**stock, "failed": None}
    assert (stock["raised"], stock["broken"]) == ("KeyError", "KeyError")
    assert stock["group_failed"] == ["KeyError", "KeyError"]
    for side in (routed, stock):
        assert (side["failed"]["value"], side["failed"]["status"]) == ("ChordError", "FAILURE")

    def both_errbacks() -> list[dict[str, str]] | None:
        ran = project.ledger(task="on_err")
        return ran if len(ran) >= 2 else None

    errbacks = stack.wait(both_errbacks, timeout=60, what="both sides' errbacks ran")
    assert sorted(x["failed"] for x in errbacks) == sorted(
        side["failed"]["body"] for side in (routed, stock)
    )
    # Through the kernel, each chord's body once, made by its last member's end: the
    # failed chord's never.
    sums = sorted(o.result for o in stack.occurrences("task:myproj.routed.tsum"))
    assert sums == [6, 6, 9, 11, 12, 116]
