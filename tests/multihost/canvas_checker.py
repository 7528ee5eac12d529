"""Judges the chaos run's canvas firings (``chaos_canvas.py``) from the ledger alone.

A canvas the driver applied (``canvas_applied``), or whose apply raised but which ran
anyway (the fault struck after the kernel committed it), is judged; one refused that
never ran made nothing. Each run writes ``start`` and ``end`` lines naming its role, its
canvas and its Celery task id; a run the kernel made twice has two task ids, a run done
again after its worker died (at least once) has one, under a later attempt.

* **chord**: every member made once; members all succeeded: the body made once (under
  the body id the caller was given), finished, given the members' results in order, and
  no errback; a member failed on purpose: no body, one errback, given the body's id.
* **chain**: each step made once, finished, given the steps before it in order, and
  started only after the step before it finished.
* **link**: a task that fails on purpose has its ``link_error`` made once, given the
  failed task's id.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

__all__ = ["COLUMNS", "CanvasFindings", "canvas_findings"]

#: The violation column of each kind of canvas.
COLUMNS = {"chord": "chord", "chain": "chain", "link_error": "link"}

_Ran = list[tuple[int, dict[str, Any]]]


@dataclass
class CanvasFindings:
    """Each by when its canvas was applied (the driver's clock, the harness's own)."""

    judged: list[float] = field(default_factory=list)
    #: A run started again under its task id (its worker died or lost its lease).
    reruns: list[float] = field(default_factory=list)
    #: (when, column, why) per violation.
    violations: list[tuple[float, str, str]] = field(default_factory=list)


def canvas_findings(lines: list[dict[str, Any]]) -> CanvasFindings:
    """The canvases of ``lines`` judged (see the module's docstring)."""
    plans: dict[str, dict[str, Any]] = {}
    applied: set[str] = set()
    ran: dict[str, _Ran] = defaultdict(list)
    for index, line in enumerate(lines):
        event = line["event"]
        if event == "canvas_applying":
            plans[line["canvas"]] = line
        elif event == "canvas_applied":
            applied.add(line["canvas"])
        elif event == "canvas":
            ran[line["canvas"]].append((index, line))
    found = CanvasFindings()
    for canvas, plan in plans.items():
        runs = ran.get(canvas, [])
        if canvas not in applied and not runs:
            continue
        at = float(plan["t"])
        found.judged.append(at)
        starts = [x["task_id"] for _, x in runs if x["phase"] == "start"]
        found.reruns += [at] * (len(starts) - len(set(starts)))
        why = _JUDGES[plan["kind"]](plan, runs)
        if why:
            found.violations.append((at, COLUMNS[plan["kind"]], f"{canvas}: {why}"))
    return found


def _ids(runs: _Ran, role: str, **match: Any) -> set[str]:
    return {
        x["task_id"]
        for _, x in runs
        if x["role"] == role and all(x.get(k) == v for k, v in match.items())
    }


def _ends(runs: _Ran, role: str, **match: Any) -> _Ran:
    return [
        (i, x)
        for i, x in runs
        if x["role"] == role
        and x["phase"] == "end"
        and all(x.get(k) == v for k, v in match.items())
    ]


def _chord(plan: dict[str, Any], runs: _Ran) -> str | None:
    for index in range(plan["members"]):
        made = _ids(runs, "member", index=index) | _ids(runs, "doomed", index=index)
        if len(made) > 1:
            return f"member {index} made {len(made)} times"
    bodies, errbacks = _ids(runs, "body"), _ids(runs, "errback")
    if plan["doomed"] is not None:
        if bodies:
            return f"body ran although member {plan['doomed']} failed"
        return _errback(runs, plan["body_id"])
    if errbacks:
        return "errback ran although every member succeeded"
    if bodies != {plan["body_id"]}:
        return f"body made {len(bodies)} times (once owed), ids {sorted(bodies)}"
    ends = _ends(runs, "body")
    if not ends:
        return "body never finished"
    wanted = [f"{plan['canvas']}:{i}" for i in range(plan["members"])]
    results = ends[0][1]["results"]
    return None if results == wanted else f"body given {results}, not the members' in order"


def _chain(plan: dict[str, Any], runs: _Ran) -> str | None:
    finished_at = -1
    for n in range(plan["steps"]):
        made = _ids(runs, "step", n=n)
        if len(made) != 1:
            return f"step {n} made {len(made)} times (once owed)"
        starts = [i for i, x in runs if x["role"] == "step" and x["n"] == n]
        if starts[0] < finished_at:
            return f"step {n} started before step {n - 1} finished"
        ends = _ends(runs, "step", n=n)
        if not ends:
            return f"step {n} never finished"
        if ends[0][1]["previous"] != list(range(n)):
            return f"step {n} given {ends[0][1]['previous']}, not {list(range(n))}"
        finished_at = ends[0][0]
    return None


def _link(plan: dict[str, Any], runs: _Ran) -> str | None:
    return _errback(runs, plan["task_id"])


def _errback(runs: _Ran, failed_id: str) -> str | None:
    """The one errback owed for ``failed_id``: made once, finished, given that id."""
    errbacks = _ids(runs, "errback")
    if len(errbacks) != 1:
        return f"errback made {len(errbacks)} times (once owed)"
    given = {x["failed"] for _, x in _ends(runs, "errback")}
    if not given:
        return "errback never finished"
    return None if given == {failed_id} else f"errback given {sorted(given)}, not {failed_id}"


_JUDGES = {"chord": _chord, "chain": _chain, "link_error": _link}
