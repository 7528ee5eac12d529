"""Reads the external ledger after a chaos run and says, per fault, what went wrong.

Inputs are the ledger's lines in file order (the real order of the writes, whatever
the hosts' clocks say), the faults as the harness injected them, what each job was
expected to fire, each host's clock offset and the firings an operator must
adjudicate and the firings the harness paused or had handed back (warm shutdown).
Every firing is attributed to the fault whose window (from its injection to the next
one) it was due in; firings due before the first fault belong to ``baseline``.

* **lost**: an at-least-once firing with no ``end`` line from any run; an
  at-most-once firing with no ``start`` line that is not waiting for an operator; a
  paused or handed-back firing that never finished.
* **duplicates**: an at-most-once firing whose effect (a fresh ``start``, not one
  resuming from a checkpoint) was written twice.
* **overlaps**: a run of an occurrence writing while a later run (higher fence) of
  the same occurrence was under way.
* **late writes**: a run writing after a later run of its occurrence had started,
  i.e. after it had lost its lease.
* **reruns** / **adjudicate**: at-least-once firings started afresh under more than one
  fence, and at-most-once firings left for an operator: evidence that a fault hit a
  running job.
* **resumed** / **rewinds**: runs that started from a checkpoint (``resumed_from`` k);
  a rewind is one whose checkpoint the ledger contradicts: no earlier run finished
  step k-1, the run that finished it went on past it (step k or ``end``) although it
  handed the occurrence back there, or the resumed run wrote a step before k. Both
  are charged to the fault under way when the resumed run started.
* **exits**: workers that exited on their own during the window (the harness starts
  them again, as a supervisor would); filled in by the harness, not judged here.
* **errors**: anything the harness saw go wrong outside the ledger (an API call that
  raised something other than a kernel error, a lease longer than the database allows).
* **recovery**: the most seconds any every-second firing due in the window waited
  from its due time to its ``end`` line (the host's clock offset taken out).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Expectation", "FaultRecord", "Row", "check", "failed", "read_ledger", "table"]

BASELINE = "baseline"


@dataclass(frozen=True)
class FaultRecord:
    """One injection: ``name`` and when it began (real epoch seconds)."""

    name: str
    at: float


@dataclass(frozen=True)
class Expectation:
    """A scheduled job the run expects firings of: every ``every_s`` from ``first`` to ``last``."""

    job_id: str
    delivery: str
    every_s: int
    first: float
    last: float

    def due(self) -> list[float]:
        start = math.ceil(self.first / self.every_s) * self.every_s
        return [float(t) for t in range(int(start), int(self.last) + 1, self.every_s)]


@dataclass
class Row:
    fault: str
    injected: int = 0
    firings: int = 0
    lost: int = 0
    duplicates: int = 0
    overlaps: int = 0
    late_writes: int = 0
    reruns: int = 0
    adjudicate: int = 0
    resumed: int = 0
    rewinds: int = 0
    #: Workers that exited on their own (the harness restarts them); reported, not judged.
    exits: int = 0
    errors: int = 0
    recovery_s: float = 0.0
    notes: list[str] = field(default_factory=list)


def read_ledger(path: Path) -> list[dict[str, Any]]:
    """The ledger's lines in file order (none before the first job wrote)."""
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text.splitlines() if line]


def check(
    lines: Sequence[dict[str, Any]],
    faults: Sequence[FaultRecord],
    expectations: Iterable[Expectation],
    *,
    skews: dict[str, float],
    adjudication: set[tuple[str, float]],
    handed_back: frozenset[tuple[str, float]] = frozenset(),
) -> list[Row]:
    """One row per fault name (plus ``baseline``), in first-injection order."""
    ordered = sorted(faults, key=lambda f: f.at)
    rows: dict[str, Row] = {BASELINE: Row(BASELINE)}
    for fault in ordered:
        rows.setdefault(fault.name, Row(fault.name)).injected += 1

    def row_at(t: float) -> Row:
        name = BASELINE
        for fault in ordered:
            if fault.at > t:
                break
            name = fault.name
        return rows[name]

    def real_time(line: dict[str, Any]) -> float:
        return float(line["t"]) - skews.get(line.get("host") or "", 0.0)

    by_firing: dict[tuple[str, float], list[tuple[int, dict[str, Any]]]] = defaultdict(list)
    for index, line in enumerate(lines):
        if line.get("scheduled_for") is not None:
            by_firing[(line["job_id"], float(line["scheduled_for"]))].append((index, line))

    for expected in expectations:
        for due in expected.due():
            row = row_at(due)
            row.firings += 1
            firing = (expected.job_id, due)
            written = by_firing.get(firing, [])
            starts = {
                line["fence"]
                for _, line in written
                if line["event"] == "start" and not line.get("resumed_from")
            }
            ends = [line for _, line in written if line["event"] == "end"]
            waiting = firing in adjudication
            row.adjudicate += waiting
            row.reruns += expected.delivery == "at-least-once" and len(starts) > 1
            if expected.delivery == "at-most-once":
                if (not starts and not waiting) or (firing in handed_back and not ends):
                    row.lost += 1
                    row.notes.append(f"lost {expected.job_id} due {due:.0f}")
                if len(starts) > 1:
                    row.duplicates += 1
                    row.notes.append(f"duplicate {expected.job_id} due {due:.0f}: {sorted(starts)}")
            elif not ends:
                row.lost += 1
                row.notes.append(f"lost {expected.job_id} due {due:.0f}")
            for index, rewind in _continuations(written):
                resumed_in = row_at(real_time(lines[index]))  # the fault under way at the resume
                resumed_in.resumed += 1
                if rewind:
                    resumed_in.rewinds += 1
                    resumed_in.notes.append(f"{expected.job_id} due {due:.0f}: {rewind}")
            if ends and expected.every_s == 1:
                row.recovery_s = max(row.recovery_s, real_time(ends[0]) - due)
            overlap, late, index = _fence_conflicts(written)
            if index is not None:  # charged to the fault under way when the stale write came
                culprit = row_at(real_time(lines[index]))
                culprit.overlaps += overlap
                culprit.late_writes += late
                culprit.notes.append(
                    f"{expected.job_id} due {due:.0f}: fence {lines[index]['fence']} on"
                    f" {lines[index].get('host')} wrote after a later fence had started"
                )
    return list(rows.values())


def _fence_conflicts(written: list[tuple[int, dict[str, Any]]]) -> tuple[int, int, int | None]:
    """(overlap, late write, index of the first stale line) between one occurrence's fences.

    By file order: a line of fence f after the first line of a higher fence is late; if
    it also comes before that fence's last line, the two runs overlapped.
    """
    spans: dict[int, tuple[int, int]] = {}
    for index, line in written:
        first, last = spans.get(line["fence"], (index, index))
        spans[line["fence"]] = (min(first, index), max(last, index))
    overlap = late = 0
    stale: int | None = None
    for index, line in written:
        later = [span for other, span in spans.items() if other > line["fence"]]
        if any(start < index for start, _ in later):
            late = 1
            stale = index if stale is None else stale
        if any(start < index < end for start, end in later):
            overlap = 1
    return overlap, late, stale


def _continuations(written: list[tuple[int, dict[str, Any]]]) -> list[tuple[int, str | None]]:
    """Each run of one occurrence resumed from a checkpoint: (index of its ``start``, how the
    ledger contradicts its checkpoint, if it does).

    A checkpoint ``{"done": k}`` is stored only when a run hands the occurrence back
    right after its step k-1 (pause or warm shutdown), so the last run to write step
    k-1 before the resumed one started is the one that handed it back: it must have
    written nothing past it, and the resumed run nothing before it.
    """
    resumed: list[tuple[int, str | None]] = []
    for index, line in written:
        k = int(line.get("resumed_from") or 0)
        if line["event"] != "start" or not k:
            continue
        fence = line["fence"]
        earlier = [(i, x) for i, x in written if i < index and x["fence"] < fence]
        finished = [x["fence"] for _, x in earlier if x["event"] == "step" and x["step"] == k - 1]
        if not finished:
            resumed.append(
                (index, f"fence {fence} resumed from step {k}, no earlier run got there")
            )
            continue
        past = [
            x
            for _, x in earlier
            if x["fence"] == finished[-1]
            and (x["event"] == "end" or (x["event"] == "step" and x["step"] >= k))
        ]
        before = [
            x for _, x in written if x["fence"] == fence and x["event"] == "step" and x["step"] < k
        ]
        rewind = (
            f"fence {fence} resumed from step {k}: fence {finished[-1]} went on past it"
            f" {len(past)} time(s), fence {fence} re-ran {len(before)} earlier step(s)"
        )
        resumed.append((index, rewind if past or before else None))
    return resumed


def failed(rows: Sequence[Row]) -> bool:
    """Loss, an at-most-once duplicate, an overlap, a late write, a rewind or an error fails."""
    return any(
        row.lost or row.duplicates or row.overlaps or row.late_writes or row.rewinds or row.errors
        for row in rows
    )


def table(rows: Sequence[Row]) -> str:
    """The figures, one line per fault, as a fixed-width table."""
    header = (
        "fault", "injected", "firings", "lost", "duplicates", "overlaps", "late",
        "reruns", "adjudicate", "resumed", "rewinds", "exits", "errors", "recovery s",
    )  # fmt: skip
    body = [
        (
            row.fault,
            *(
                str(n)
                for n in (
                    row.injected,
                    row.firings,
                    row.lost,
                    row.duplicates,
                    row.overlaps,
                    row.late_writes,
                    row.reruns,
                    row.adjudicate,
                    row.resumed,
                    row.rewinds,
                    row.exits,
                    row.errors,
                )  # fmt: skip
            ),
            f"{row.recovery_s:.1f}",
        )
        for row in rows
    ]
    widths = [max(len(r[i]) for r in (header, *body)) for i in range(len(header))]
    return "\n".join(
        "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        )
        for line in (header, *body)
    )
