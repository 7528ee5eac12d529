"""What a chaos run or a soak leaves behind for the checker: the ledger, the kernel's rows
and events, and what the harness did and saw.

Everything is plain data, so the checker can be fed a made-up run (``mutations.py``)
exactly as it is fed a real one (``read_kernel`` and the harness).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernel import Kernel

__all__ = [
    "Evidence",
    "Expectation",
    "FaultRecord",
    "Handback",
    "KernelEvent",
    "KernelRow",
    "every",
    "read_kernel",
    "read_ledger",
    "stamp_due_times",
]


@dataclass(frozen=True)
class FaultRecord:
    """One injection: ``name``, when it began (real epoch seconds) and what it did."""

    name: str
    at: float
    injected: str = ""


@dataclass(frozen=True)
class Expectation:
    """A job's firings the run owes: its due times (epoch seconds) by its schedule."""

    job_id: str
    delivery: str
    dues: tuple[float, ...]
    #: Whether its waits from due time to ``end`` make the window's ``recovery s``.
    timed: bool = False


def every(job_id: str, delivery: str, every_s: int, first: float, last: float) -> Expectation:
    """An every-``every_s``-seconds job's firings from ``first`` to ``last`` (epoch-aligned)."""
    start = math.ceil(first / every_s) * every_s
    dues = tuple(float(t) for t in range(int(start), int(last) + 1, every_s))
    return Expectation(job_id, delivery, dues, timed=every_s == 1)


@dataclass(frozen=True)
class KernelRow:
    """An occurrence as the kernel keeps it at the end of the run."""

    id: int
    job_id: str
    trigger_key: str
    scheduled_for: float
    status: str
    fence: int
    skip_reason: str | None = None


@dataclass(frozen=True)
class KernelEvent:
    """One event of the kernel's log about an occurrence (``at``: database clock)."""

    type: str
    occurrence_id: int
    fence: int | None
    at: float


@dataclass(frozen=True)
class Handback:
    """A pause/resume or warm shutdown and the occurrences it was aimed at.

    ``kind`` is ``pause`` (an operator paused them, then resumed them) or ``warm`` (their
    worker was asked to stop; they must be handed back and resumed elsewhere). No
    occurrence means the fault hit nothing, which the checker counts against it.
    """

    kind: str
    at: float
    occurrence_ids: tuple[int, ...]


@dataclass
class Evidence:
    """Everything the checker judges; ``judged_at`` is when the kernel was read."""

    lines: Sequence[dict[str, Any]]
    rows: Sequence[KernelRow]
    events: Sequence[KernelEvent]
    faults: Sequence[FaultRecord]
    expectations: Sequence[Expectation]
    judged_at: float
    #: Each host's known clock offset (seconds ahead of real time).
    skews: dict[str, float] = field(default_factory=dict)
    handbacks: Sequence[Handback] = ()
    #: (when it exited, what) of each process that exited when it should not have.
    exits: Sequence[tuple[float, str]] = ()
    #: (when, what) of anything the harness saw go wrong outside the ledger.
    errors: Sequence[tuple[float, str]] = ()


def read_ledger(path: Path) -> list[dict[str, Any]]:
    """The ledger's lines in file order (none before the first job wrote)."""
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text.splitlines() if line]


def read_kernel(
    kernel: Kernel, job_ids: Iterable[str]
) -> tuple[list[KernelRow], list[KernelEvent]]:
    """Every occurrence of ``job_ids`` and every event about an occurrence, oldest first."""
    wanted = set(job_ids)
    # The log first: a row read after it is at least as new, so a settle the log holds
    # and the row lacks is one the kernel did not keep, not one that came in between.
    events: list[KernelEvent] = []
    after = 0
    while True:
        logged = kernel.events(after_id=after, limit=1000)
        events += [
            KernelEvent(e.type, e.occurrence_id, e.fence, e.at.timestamp())
            for e in logged
            if e.occurrence_id is not None and e.job_id in wanted
        ]
        if len(logged) < 1000:
            break
        after = logged[-1].id
    rows: list[KernelRow] = []
    for job_id in sorted(wanted):
        before: int | None = None
        while True:
            page = kernel.list_occurrences(job_id=job_id, limit=1000, before_id=before)
            rows += [
                KernelRow(
                    o.id,
                    o.job_id,
                    o.trigger_key,
                    o.scheduled_for.timestamp(),
                    str(o.status),
                    o.fence,
                    o.skip_reason,
                )
                for o in page
            ]
            if len(page) < 1000:
                break
            before = min(o.id for o in page)
    return sorted(rows, key=lambda r: r.id), events


def stamp_due_times(lines: Sequence[dict[str, Any]], rows: Sequence[KernelRow]) -> None:
    """Give each line that names only its occurrence (a shell child's) that occurrence's
    due time and job, from the kernel's rows."""
    due = {row.id: row for row in rows}
    for line in lines:
        row = due.get(line.get("occurrence_id", -1))
        if line.get("scheduled_for") is None and row is not None:
            line["scheduled_for"] = row.scheduled_for
