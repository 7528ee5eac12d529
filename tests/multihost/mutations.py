"""The checker tested by mutation: a clean made-up run, and one mutant per violation.

The clean run holds what a faulty but correct deployment leaves behind: a skipped
firing with its reason, an at-least-once rerun after a lost lease, a checkpointing run
paused, resumed and finished by a later fence, lines written on a host whose clock
is 5 minutes ahead, and canvases (a chord whose body ran again after its worker died,
a chord failed on purpose, a chain, a link_error, an apply refused by a fault). Each
mutant changes it the way one violation would; the checker
must flag each in its own column and in no other (``self_test``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from multihost.checker import VIOLATIONS, check
from multihost.evidence import (
    Evidence,
    Expectation,
    FaultRecord,
    Handback,
    KernelEvent,
    KernelRow,
)
from multihost.report import failed

__all__ = ["MUTANTS", "clean_run", "self_test"]

T0 = 1_000_000.0
AHEAD = 300.0
#: The checkpointing occurrence the operator pauses after its step 1.
PAUSED_ID = 900
_JOBS = ("alo", "amo", "long")


class _Run:
    """Builds an evidence bundle one occurrence at a time."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.rows: list[KernelRow] = []
        self.events: list[KernelEvent] = []

    def occurrence(
        self,
        job: str,
        due: float,
        status: str = "succeeded",
        fence: int = 1,
        occurrence_id: int | None = None,
        reason: str | None = None,
    ) -> int:
        oid = occurrence_id or int(due - T0) * 10 + _JOBS.index(job)
        self.rows.append(KernelRow(oid, job, f"every:{due:.1f}", due, status, fence, reason))
        return oid

    def event(self, kind: str, oid: int, fence: int | None, at: float) -> None:
        self.events.append(KernelEvent(f"occurrence_{kind}", oid, fence, at))

    def write(
        self,
        event: str,
        job: str,
        due: float,
        oid: int,
        fence: int,
        t: float,
        host: str = "h1",
        **extra: Any,
    ) -> None:
        t += AHEAD if host == "ahead" else 0.0
        self.lines.append(
            {
                "event": event,
                "job_id": job,
                "scheduled_for": due,
                "occurrence_id": oid,
                "fence": fence,
                "host": host,
                "t": t,
                **extra,
            }
        )

    def clean(self, job: str, due: float, host: str = "h1") -> int:
        """One run that started at its due time and succeeded."""
        oid = self.occurrence(job, due)
        self.event("claimed", oid, 1, due + 0.05)
        self.write("start", job, due, oid, 1, due + 0.1, host)
        self.write("end", job, due, oid, 1, due + 0.4, host)
        self.event("succeeded", oid, 1, due + 0.5)
        return oid


def clean_run() -> Evidence:
    run = _Run()
    dues = [T0 + i for i in range(10)]
    for due in dues:
        if due == T0 + 3:  # overlap policy said no: recorded, with its reason
            oid = run.occurrence("alo", due, "skipped", 0, reason="overlap: skip")
            run.event("skipped", oid, 0, due)
        elif due == T0 + 5:  # its worker was killed: the lease expired, fence 2 ran it
            oid = run.occurrence("alo", due, fence=2)
            run.event("claimed", oid, 1, due + 0.05)
            run.write("start", "alo", due, oid, 1, due + 0.1)
            run.event("claimed", oid, 2, due + 6.0)
            run.write("start", "alo", due, oid, 2, due + 6.1)
            run.write("end", "alo", due, oid, 2, due + 6.4)
            run.event("succeeded", oid, 2, due + 6.5)
        else:
            run.clean("alo", due)
        run.clean("amo", due, host="ahead")
    due = T0 + 2  # paused after step 1 (checkpoint {"done": 2}), resumed, finished
    oid = run.occurrence("long", due, fence=2, occurrence_id=PAUSED_ID)
    run.event("claimed", oid, 1, due + 0.05)
    run.write("start", "long", due, oid, 1, due + 0.1, resumed_from=0)
    run.write("step", "long", due, oid, 1, due + 1.1, step=0)
    run.write("step", "long", due, oid, 1, due + 2.1, step=1)
    run.event("pause_requested", oid, 1, due + 1.5)
    run.event("paused", oid, 1, due + 2.2)
    run.event("resumed", oid, 1, due + 4.2)
    run.event("claimed", oid, 2, due + 4.3)
    run.write("start", "long", due, oid, 2, due + 4.4, resumed_from=2)
    run.write("step", "long", due, oid, 2, due + 5.4, step=2)
    run.write("end", "long", due, oid, 2, due + 5.5)
    run.event("succeeded", oid, 2, due + 5.6)
    _canvases(run, T0 + 1)
    return Evidence(
        lines=run.lines,
        rows=run.rows,
        events=sorted(run.events, key=lambda e: e.at),
        faults=[
            FaultRecord("pause", T0 + 2.5, "pause occurrence 900"),
            FaultRecord("kill", T0 + 5.5, "kill -9 worker h1"),
        ],
        expectations=[
            Expectation("alo", "at-least-once", tuple(dues), timed=True),
            Expectation("amo", "at-most-once", tuple(dues), timed=True),
            Expectation("long", "at-least-once", (T0 + 2,)),
        ],
        judged_at=T0 + 200,
        skews={"ahead": AHEAD},
        handbacks=[Handback("pause", T0 + 2.5, (PAUSED_ID,))],
    )


def _canvases(run: _Run, at: float) -> None:
    """The canvas firings as the driver (``canvas_applying`` / ``_applied``) and their runs
    (``canvas``, ``start`` and ``end``) write them."""

    def applied(kind: str, canvas: str, *events: str, **plan: Any) -> None:
        for event in events or ("canvas_applying", "canvas_applied"):
            run.lines.append({"event": event, "kind": kind, "canvas": canvas, "t": at, **plan})

    def ran(role: str, canvas: str, task_id: str, *phases: str, **extra: Any) -> None:
        extra.setdefault("attempt", 1)
        for phase in phases or ("start", "end"):
            run.lines.append(
                {"event": "canvas", "role": role, "phase": phase, "canvas": canvas,
                 "task_id": task_id, "host": "h1", "t": at + 0.5, **extra}
            )  # fmt: skip

    applied("chord", "chord-a", members=2, doomed=None, body_id="body-a")
    results = ["chord-a:0", "chord-a:1"]
    ran("member", "chord-a", "m0", index=0)
    ran("member", "chord-a", "m1", index=1)
    ran("body", "chord-a", "body-a", results=results)
    ran("body", "chord-a", "body-a", attempt=2, results=results)  # at least once
    applied("chord", "chord-b", members=2, doomed=1, body_id="body-b")
    ran("member", "chord-b", "n0", index=0)
    ran("doomed", "chord-b", "n1", "start", index=1)
    ran("errback", "chord-b", "errbacks:1:0", failed="body-b")
    applied("chain", "chain-a", steps=3)
    for n in range(3):
        ran("step", "chain-a", f"s{n}", n=n, previous=list(range(n)))
    applied("link_error", "link-a", task_id="f0")
    ran("doomed", "link-a", "f0", "start", index=0)
    ran("errback", "link-a", "errbacks:2:0", failed="f0")
    applied("chord", "chord-c", "canvas_applying", "canvas_refused", members=2, doomed=None,
            body_id="body-c")  # fmt: skip


def _canvas_copy(ev: Evidence, of: str, **changes: Any) -> None:
    """The canvas run of task id ``of`` made again, as ``changes`` say."""
    ev.lines += [{**x, **changes} for x in ev.lines if x.get("task_id") == of]


def _lines(ev: Evidence, job: str, due: float) -> list[dict[str, Any]]:
    return [x for x in ev.lines if (x.get("job_id"), x.get("scheduled_for")) == (job, due)]


def _row(ev: Evidence, job: str, due: float) -> KernelRow:
    return next(r for r in ev.rows if (r.job_id, r.scheduled_for) == (job, due))


def _replace_row(ev: Evidence, job: str, due: float, **changes: Any) -> None:
    old = _row(ev, job, due)
    ev.rows = [dataclasses.replace(r, **changes) if r is old else r for r in ev.rows]


def _drop(ev: Evidence, job: str, due: float) -> None:
    """Lose one firing altogether: no occurrence, no line, no event."""
    oid = _row(ev, job, due).id
    ev.rows = [r for r in ev.rows if r.id != oid]
    ev.lines = [x for x in ev.lines if x.get("occurrence_id") != oid]
    ev.events = [e for e in ev.events if e.occurrence_id != oid]


def _rewrite(
    ev: Evidence,
    job: str,
    due: float,
    lines: list[tuple[str, int, float]],
    events: list[tuple[str, int, float]],
    fence: int,
) -> None:
    """Replace one occurrence's lines and events by ``(event, fence, seconds after due)``."""
    oid = _row(ev, job, due).id
    ev.lines = [x for x in ev.lines if x.get("occurrence_id") != oid]
    ev.events = [e for e in ev.events if e.occurrence_id != oid]
    run = _Run()
    for event, line_fence, after in lines:
        run.write(event, job, due, oid, line_fence, due + after)
    for kind, event_fence, after in events:
        run.event(kind, oid, event_fence, due + after)
    ev.lines = [*ev.lines, *run.lines]
    ev.events = sorted([*ev.events, *run.events], key=lambda e: e.at)
    _replace_row(ev, job, due, fence=fence)


def _extra(ev: Evidence) -> None:
    """An occurrence half-way between two firings of an every-second job, run once."""
    run = _Run()
    oid = run.occurrence("alo", T0 + 4.5, occurrence_id=555)
    run.event("claimed", oid, 1, T0 + 4.6)
    run.write("start", "alo", T0 + 4.5, oid, 1, T0 + 4.7)
    run.write("end", "alo", T0 + 4.5, oid, 1, T0 + 4.9)
    run.event("succeeded", oid, 1, T0 + 5.0)
    _add(ev, run)


def _add(ev: Evidence, run: _Run) -> None:
    ev.rows = [*ev.rows, *run.rows]
    ev.lines = [*ev.lines, *run.lines]
    ev.events = sorted([*ev.events, *run.events], key=lambda e: e.at)


def _double(ev: Evidence) -> None:
    """A second occurrence (another trigger key) for one firing, each run once."""
    run = _Run()
    oid = run.occurrence("amo", T0 + 1, occurrence_id=777)
    run.rows[0] = dataclasses.replace(run.rows[0], trigger_key="every:again")
    run.event("claimed", oid, 1, T0 + 1.2)
    run.write("start", "amo", T0 + 1, oid, 1, T0 + 1.3)
    run.write("end", "amo", T0 + 1, oid, 1, T0 + 1.6)
    run.event("succeeded", oid, 1, T0 + 1.7)
    _add(ev, run)


def _reclaimed(ev: Evidence, job: str, due: float, lines: list[tuple[str, int, float]]) -> None:
    """Fence 1's lease was lost at due + 6 s, fence 2 claimed the occurrence and succeeded;
    ``lines`` are what the two runs wrote."""
    reclaim = [("claimed", 1, 0.05), ("claimed", 2, 6.0), ("succeeded", 2, 6.5)]
    _rewrite(ev, job, due, lines, reclaim, 2)


def _early(ev: Evidence) -> None:
    """A run that started 3 s before its due time (by the host's corrected clock)."""
    for line in _lines(ev, "amo", T0 + 4):
        line["t"] -= 3.2


def _lost_update(ev: Evidence) -> None:
    """The kernel logged the success, the row went back to running."""
    _replace_row(ev, "alo", T0 + 1, status="running")


def _rewind(ev: Evidence) -> None:
    """The paused run went on to step 2, yet its successor resumed from step 2."""
    ev.lines = [*ev.lines]
    paused = [x for x in ev.lines if x.get("occurrence_id") == PAUSED_ID and x["fence"] == 1]
    ev.lines.insert(
        ev.lines.index(paused[-1]) + 1, paused[-1] | {"step": 2, "t": paused[-1]["t"] + 0.05}
    )


def _handback(ev: Evidence) -> None:
    """The operator's resume never reached the log."""
    ev.events = [e for e in ev.events if e.type != "occurrence_resumed"]


def _stuck(ev: Evidence) -> None:
    """An at-most-once run that started and never settled, long past the bound."""
    _rewrite(ev, "amo", T0 + 9, [("start", 1, 0.1)], [("claimed", 1, 0.05)], 1)
    _replace_row(ev, "amo", T0 + 9, status="running")


MUTANTS: dict[str, Callable[[Evidence], None]] = {
    "lost": lambda ev: _drop(ev, "alo", T0 + 7),
    "extra": _extra,
    "double": _double,
    # An at-most-once occurrence claimed again after a lost lease: its effect twice.
    "duplicate": lambda ev: _reclaimed(
        ev, "amo", T0 + 7, [("start", 1, 0.1), ("start", 2, 6.1), ("end", 2, 6.4)]
    ),
    # The fenced-off run writes while the new owner is writing.
    "overlap": lambda ev: _reclaimed(
        ev, "alo", T0 + 8, [("start", 1, 0.1), ("start", 2, 6.1), ("end", 1, 6.2), ("end", 2, 6.4)]
    ),
    # The fenced-off run writes after the reclaim, before the new owner writes anything.
    "late": lambda ev: _reclaimed(
        ev, "alo", T0 + 8, [("start", 1, 0.1), ("end", 1, 6.05), ("start", 2, 6.1), ("end", 2, 6.4)]
    ),
    "early": _early,
    "lost_update": _lost_update,
    "rewind": _rewind,
    "handback": _handback,
    "exit": lambda ev: setattr(ev, "exits", [(T0 + 7, "worker-h1-4 exit status 1")]),
    "stuck": _stuck,
    "errors": lambda ev: setattr(ev, "errors", [(T0 + 2, "lease ends 300 s ahead")]),
    # The last member's settle made the body twice (two settles both counted down).
    "chord": lambda ev: _canvas_copy(ev, "body-a", task_id="body-a2", attempt=1),
    # The settle of step 1 never made step 2.
    "chain": lambda ev: setattr(ev, "lines", [x for x in ev.lines if x.get("task_id") != "s2"]),
    # The dead letter's errback made by the worker and again by Beat's lease expiry.
    "link": lambda ev: _canvas_copy(ev, "errbacks:2:0", task_id="errbacks:3:0"),
}


def self_test() -> tuple[str, bool]:
    """Judges the clean run and each mutant; (the table, whether each was flagged in its
    own column and only there, and the clean run in none)."""
    cases: list[tuple[str, str]] = [("clean", "")]
    ok = True
    for name, mutate in [("clean", None), *MUTANTS.items()]:
        evidence = clean_run()
        if mutate is not None:
            mutate(evidence)
        rows = check(evidence)
        flagged = {c: sum(r.counts[c] for r in rows) for c in VIOLATIONS}
        flagged = {c: n for c, n in flagged.items() if n}
        wanted = {name} if mutate is not None else set()
        right = set(flagged) == wanted and (mutate is None or flagged[name] == 1)
        right = right and failed(rows) == bool(wanted)
        ok = ok and right
        shown = ", ".join(f"{c}={n}" for c, n in flagged.items()) or "none"
        cases.append((name, f"{shown:<28} {'ok' if right else 'WRONG'}"))
    del cases[0]
    width = max(len(name) for name, _ in cases)
    lines = [f"{'ledger':<{width}}  {'flagged':<28} verdict"]
    lines += [f"{name:<{width}}  {verdict}" for name, verdict in cases]
    return "\n".join(lines), ok
