"""Reads the external ledger after a chaos run and says, per fault, what went wrong.

Inputs are the ledger's lines in file order (the real order of the writes, whatever
the hosts' clocks say), the faults as the harness injected them, what each job was
expected to fire, each host's clock offset and the firings an operator must
adjudicate. Every firing is attributed to the fault whose window (from its injection
to the next one) it was due in; firings due before the first fault belong to
``baseline``.

* **lost**: an at-least-once firing with no ``end`` line from any run; an
  at-most-once firing with no ``start`` line that is not waiting for an operator.
* **duplicates**: an at-most-once firing whose effect (``start``) was written twice.
* **overlaps**: a run of an occurrence writing while a later run (higher fence) of
  the same occurrence was under way.
* **late writes**: a run writing after a later run of its occurrence had started,
  i.e. after it had lost its lease.
* **reruns** / **adjudicate**: at-least-once firings run under more than one fence, and
  at-most-once firings left for an operator: evidence that a fault hit a running job.
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
    #: ``shell`` runs are not told their occurrence: only their number can be checked.
    counted_only: bool = False

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
        if expected.counted_only:
            _count_runs(lines, expected, rows)
            continue
        for due in expected.due():
            row = row_at(due)
            row.firings += 1
            written = by_firing.get((expected.job_id, due), [])
            starts = {line["fence"] for _, line in written if line["event"] == "start"}
            ends = [line for _, line in written if line["event"] == "end"]
            waiting = (expected.job_id, due) in adjudication
            row.adjudicate += waiting
            row.reruns += expected.delivery == "at-least-once" and len(starts) > 1
            if expected.delivery == "at-most-once":
                if not starts and not waiting:
                    row.lost += 1
                    row.notes.append(f"lost {expected.job_id} due {due:.0f}")
                if len(starts) > 1:
                    row.duplicates += 1
                    row.notes.append(f"duplicate {expected.job_id} due {due:.0f}: {sorted(starts)}")
            elif not ends:
                row.lost += 1
                row.notes.append(f"lost {expected.job_id} due {due:.0f}")
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


def _count_runs(
    lines: Sequence[dict[str, Any]], expected: Expectation, rows: dict[str, Row]
) -> None:
    """A counted-only job: fewer finished runs than firings means at least that many lost."""
    due = expected.due()
    ended = [
        line for line in lines if line["event"] == "end" and line.get("job_id") == expected.job_id
    ]
    missing = max(0, len(due) - len(ended))
    row = rows[BASELINE]
    row.firings += len(due)
    if missing:
        row.lost += missing
        row.notes.append(f"{expected.job_id}: {len(ended)} runs finished for {len(due)} firings")


def failed(rows: Sequence[Row]) -> bool:
    """Loss, an at-most-once duplicate, an overlap, a late write or an error fails the run."""
    return any(
        row.lost or row.duplicates or row.overlaps or row.late_writes or row.errors for row in rows
    )


def table(rows: Sequence[Row]) -> str:
    """The figures, one line per fault, as a fixed-width table."""
    header = (
        "fault", "injected", "firings", "lost", "duplicates", "overlaps", "late",
        "reruns", "adjudicate", "errors", "recovery s",
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
