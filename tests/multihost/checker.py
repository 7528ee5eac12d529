"""Judges a chaos run or a soak from its evidence (``evidence.py``): one row per fault.

Every figure is computed from the external ledger (its lines in file order: the real
order of the writes, whatever the hosts' clocks say; each line's time is its host's
clock, corrected by that host's known offset), the kernel's own rows and events, the
schedules' expected firings and what the harness did. Each violation is charged to
the fault window (an injection until the next one; ``baseline`` before the first)
in which its effect happened: a lost firing at its due time, a stale write when it
was written, a rerun when it started, a lost settle when the kernel acknowledged it.

Violations (each column fails the run when non-zero):

* **lost**: a firing the schedule owes that is neither run (at-least-once: an ``end``
  line; at-most-once: a ``start`` line or an operator's adjudication pending, its own or
  an earlier run's of its job, which holds the job's later runs) nor
  recorded by the kernel as skipped with a reason.
* **extra**: an occurrence of a judged job at a time its schedule does not owe (between
  its first and last owed firing).
* **double**: more than one occurrence for one firing (by the kernel's rows or by the
  occurrence ids the ledger names for it), or for one (job, trigger key).
* **duplicate**: an at-most-once occurrence whose effect (a fresh ``start``, not a resume
  from a checkpoint) was written more than once.
* **overlap** / **late**: a run writing after its lease was lost (a later fence claimed
  the occurrence, or it was sent for adjudication, by the kernel's events; or a later
  fence had written, by the ledger): an overlap when a later fence of the occurrence
  was writing at that moment, else a late write. The two partition the stale writes.
* **early**: a run that started more than ``early_tolerance_s`` before its due time.
* **lost update**: a settle the kernel acknowledged (its event is in the log) that the
  row does not keep: the occurrence's last event is a terminal settle its row
  contradicts, or it was claimed again after it succeeded.
* **rewind**: a run resumed from a checkpoint the ledger contradicts (no earlier run
  finished the step before it; the run that handed back went on past it; the resumed
  run re-ran a step before it). A run that lost its lease may have gone on past the
  checkpoint its last renewal stored: those steps are redone (at-least-once), also to
  its end when its settle never landed (no terminal event at its fence: the database
  was away), but not past a settle the kernel logged.
* **handback**: a pause/resume or warm shutdown that hit no run, or whose run was not
  handed back (``occurrence_paused`` and ``occurrence_resumed`` / ``occurrence_handed_back``)
  and finished by a later fence (from its checkpoint or, when the run stopped before a
  safe point, from the start: ``rewind`` judges the checkpoint).
* **exit**: a process that exited when it should not have (seen by the harness), except
  the transport failure in ``TRANSPORT_EXITS``: kombu's Redis transport ends a worker so
  when Redis goes away, the README tells users to supervise workers for it, and the
  harness restarts the worker as a supervisor would. Such an exit is counted as
  ``transport_exit`` (information); what it could cost (a lost, stuck or duplicated
  run) is still judged by those columns.
* **stuck**: an occurrence not settled ``stuck_after_s`` after its due time (and not
  waiting for an operator) whose settle the kernel never acknowledged.
* **errors**: anything else the harness saw go wrong (a kernel call raising something
  other than a kernel error, a lease longer than the database clock allows).
* **chord** / **chain** / **link**: a canvas firing (``canvas_checker.py``) whose body,
  step or errback was not made exactly once, given what it is owed, in order; charged
  to the window it was applied in.

Information, not judged: ``expected`` firings, ``skipped`` (each reason in the notes),
``reruns`` (a fresh start under a later fence), ``adjudicate``, ``resumed`` and
``recovery_s`` (the longest an every-second firing waited from due time to ``end``),
``canvas`` (canvases judged) and ``canvas_reruns`` (their runs started again under the
same task id), each by the window its canvas was applied in.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from multihost.canvas_checker import canvas_findings
from multihost.evidence import Evidence, Expectation, Handback, KernelEvent, KernelRow

__all__ = ["INFO", "VIOLATIONS", "Row", "check"]

BASELINE = "baseline"
#: How far before its due time a run may start (clock granularity, not a licence).
EARLY_TOLERANCE_S = 1.0
#: How long after its due time an occurrence may remain unsettled.
STUCK_AFTER_S = 90.0

VIOLATIONS = (
    "lost", "extra", "double", "duplicate", "overlap", "late", "early", "lost_update", "rewind",
    "handback", "exit", "stuck", "errors", "chord", "chain", "link",
)  # fmt: skip
INFO = ("reruns", "adjudicate", "resumed", "transport_exit", "canvas", "canvas_reruns")
#: Why kombu ended a worker when its broker went away (the README's "Supervise
#: workers"): Redis restoring unacknowledged messages without a connection.
TRANSPORT_EXITS = (
    "Unrecoverable error: AttributeError(\"'NoneType' object has no attribute 'hostname'\")",
)
_TERMINAL = {
    "occurrence_succeeded": "succeeded",
    "occurrence_dead_letter": "dead_letter",
    "occurrence_cancelled": "cancelled",
    "occurrence_skipped": "skipped",
}
_UNSETTLED = {"queued", "running", "retry_wait"}


@dataclass
class Row:
    """One fault (all its injections) or one injection's window."""

    fault: str
    injected: int = 0
    expected: int = 0
    skipped: int = 0
    #: Why the kernel skipped the firings counted in ``skipped``.
    skip_reasons: Counter[str] = field(default_factory=Counter)
    counts: Counter[str] = field(default_factory=Counter)
    recovery_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    #: Per injection: what was injected and what was observed in its window.
    observed: list[str] = field(default_factory=list)

    def add(self, column: str, note: str | None = None) -> None:
        self.counts[column] += 1
        if note:
            self.notes.append(f"{column}: {note}")

    def merge(self, other: Row) -> None:
        self.injected += other.injected
        self.expected += other.expected
        self.skipped += other.skipped
        self.skip_reasons.update(other.skip_reasons)
        self.counts.update(other.counts)
        self.recovery_s = max(self.recovery_s, other.recovery_s)
        self.notes += other.notes


class _Windows:
    """Injection windows by time: ``at(t)`` is the window's row under way at ``t``."""

    def __init__(self, evidence: Evidence) -> None:
        self.faults = sorted(evidence.faults, key=lambda f: f.at)
        self.starts = [f.at for f in self.faults]
        self.baseline = Row(BASELINE)
        self.rows = [Row(f.name, injected=1) for f in self.faults]

    def at(self, t: float) -> Row:
        i = bisect_right(self.starts, t)
        return self.rows[i - 1] if i else self.baseline

    def by_fault(self) -> list[Row]:
        """One row per fault name (first-injection order), ``baseline`` first; each row's
        ``observed`` lists its injections."""
        merged: dict[str, Row] = {BASELINE: Row(BASELINE)}
        merged[BASELINE].merge(self.baseline)
        for fault, row in zip(self.faults, self.rows, strict=True):
            total = merged.setdefault(fault.name, Row(fault.name))
            total.merge(row)
            total.observed.append(f"{fault.injected or fault.name}; {_observed(row)}")
        return list(merged.values())


def _observed(row: Row) -> str:
    seen = [f"{row.counts[c]} {c.replace('_', ' ')}" for c in INFO if row.counts[c]]
    seen += [f"{row.counts['late']} late writes", f"{row.counts['overlap']} overlaps"]
    seen += [f"{row.counts[c]} {c.replace('_', ' ')}" for c in VIOLATIONS if row.counts[c]]
    return ", ".join(dict.fromkeys(seen))


def check(
    evidence: Evidence,
    *,
    early_tolerance_s: float = EARLY_TOLERANCE_S,
    stuck_after_s: float = STUCK_AFTER_S,
) -> list[Row]:
    """One row per fault name, ``baseline`` first, in first-injection order."""
    judge = _Judge(evidence)
    judge.firings()
    judge.runs(early_tolerance_s)
    judge.settles(stuck_after_s)
    judge.handbacks()
    for when, what in evidence.exits:
        known = any(failure in what for failure in TRANSPORT_EXITS)
        judge.windows.at(when).add("transport_exit" if known else "exit", what)
    for when, what in evidence.errors:
        judge.windows.at(when).add("errors", what)
    canvases = canvas_findings(evidence.lines)
    for column, times in (("canvas", canvases.judged), ("canvas_reruns", canvases.reruns)):
        for when in times:
            judge.windows.at(when).counts[column] += 1
    for when, column, why in canvases.violations:
        judge.windows.at(when).add(column, why)
    return judge.windows.by_fault()


class _Judge:
    def __init__(self, evidence: Evidence) -> None:
        self.ev = evidence
        self.windows = _Windows(evidence)
        self.delivery = {e.job_id: e.delivery for e in evidence.expectations}
        self.lines_of: dict[int, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
        for index, line in enumerate(evidence.lines):
            if line.get("occurrence_id") is not None:
                self.lines_of[int(line["occurrence_id"])].append((index, line))
        #: Per job, the due time of its earliest run waiting for an operator's verdict:
        #: the kernel holds the job's later runs behind it (no two possibly-live runs).
        self.unresolved_since: dict[str, float] = {}
        for row in evidence.rows:
            if row.status == "needs_adjudication":
                since = self.unresolved_since.get(row.job_id, row.scheduled_for)
                self.unresolved_since[row.job_id] = min(since, row.scheduled_for)
        self.events_of: dict[int, list[KernelEvent]] = defaultdict(list)
        for event in evidence.events:
            self.events_of[event.occurrence_id].append(event)
        self.row_of = {row.id: row for row in evidence.rows}

    def real(self, line: dict[str, Any]) -> float:
        return float(line["t"]) - float(self.ev.skews.get(line.get("host") or "", 0.0))

    def firings(self) -> None:
        """Each expected firing: found, skipped with a reason, run or lost; doubles."""
        rows_at: dict[tuple[str, float], list[KernelRow]] = defaultdict(list)
        by_trigger: dict[tuple[str, str], set[int]] = defaultdict(set)
        for row in self.ev.rows:
            rows_at[(row.job_id, round(row.scheduled_for, 3))].append(row)
            by_trigger[(row.job_id, row.trigger_key)].add(row.id)
        named: dict[tuple[str, float], set[int]] = defaultdict(set)
        for line in self.ev.lines:
            if line.get("scheduled_for") is not None and line.get("occurrence_id") is not None:
                named[(line["job_id"], round(float(line["scheduled_for"]), 3))].add(
                    int(line["occurrence_id"])
                )
        for expected in self.ev.expectations:
            for due in expected.dues:
                firing = (expected.job_id, round(due, 3))
                ids = {r.id for r in rows_at[firing]} | named[firing]
                self._firing(expected, due, [self.row_of.get(i) for i in sorted(ids)])
            owed = {round(due, 3) for due in expected.dues}
            span = (min(owed), max(owed)) if owed else (0.0, -1.0)
            for row in self.ev.rows:
                due = round(row.scheduled_for, 3)
                if row.job_id == expected.job_id and span[0] <= due <= span[1] and due not in owed:
                    self.windows.at(due).add(
                        "extra",
                        f"{row.job_id} occurrence {row.id} at {due:.3f}, not on its schedule",
                    )
        for (job_id, trigger), ids in by_trigger.items():
            if len(ids) > 1 and job_id in self.delivery:
                first = self.row_of[min(ids)]
                self.windows.at(first.scheduled_for).add(
                    "double", f"{job_id} trigger {trigger}: occurrences {sorted(ids)}"
                )

    def _firing(self, expected: Expectation, due: float, found: list[KernelRow | None]) -> None:
        window = self.windows.at(due)
        window.expected += 1
        what = f"{expected.job_id} due {due:.0f}"
        if len(found) > 1:
            window.add("double", f"{what}: occurrences {[r.id for r in found if r]}")
        if not found:
            window.add("lost", f"{what}: no occurrence")
            return
        skipped = [r for r in found if r is not None and r.status == "skipped"]
        if skipped and len(skipped) == len(found):
            if all(r.skip_reason for r in skipped):
                window.skipped += 1
                window.skip_reasons[str(skipped[0].skip_reason)] += 1
            else:
                window.add("lost", f"{what}: skipped without a reason")
            return
        ids = [r.id for r in found if r is not None]
        written = [line for i in ids for _, line in self.lines_of.get(i, [])]
        waiting = any(r is not None and self._awaits_verdict(r) for r in found)
        window.counts["adjudicate"] += waiting
        ends = [line for line in written if line["event"] == "end"]
        if expected.delivery == "at-most-once":
            if not any(line["event"] == "start" for line in written) and not waiting:
                window.add("lost", f"{what}: no effect, no adjudication pending")
        elif not ends:
            window.add("lost", f"{what}: never finished")
        if ends and expected.timed:
            window.recovery_s = max(window.recovery_s, min(map(self.real, ends)) - due)

    def runs(self, early_tolerance_s: float) -> None:
        """Each occurrence's runs against each other and against the kernel's events."""
        for occurrence_id, written in self.lines_of.items():
            first = written[0][1]
            job, due = first["job_id"], float(first.get("scheduled_for") or 0.0)
            what = f"{job} due {due:.0f} (occurrence {occurrence_id})"
            fresh = [
                (i, x) for i, x in written if x["event"] == "start" and not x.get("resumed_from")
            ]
            if self.delivery.get(job) == "at-most-once" and len(fresh) > 1:
                self._at(fresh[1][1]).add(
                    "duplicate",
                    f"{what}: effect written by fences {[x['fence'] for _, x in fresh]}",
                )
            for _, line in fresh[1:]:
                if line["fence"] > fresh[0][1]["fence"]:
                    self._at(line).counts["reruns"] += 1
            early = [
                x
                for _, x in written
                if x["event"] == "start" and self.real(x) < due - early_tolerance_s
            ]
            if early:
                x = early[0]
                self._at(x).add(
                    "early",
                    f"{what}: fence {x['fence']} started on {x.get('host')}"
                    f" {due - self.real(x):.1f} s before its due time",
                )
            self._stale(occurrence_id, what, written)
            handed_back = {
                e.fence
                for e in self.events_of[occurrence_id]
                if e.type in ("occurrence_paused", "occurrence_handed_back")
            }
            settled = {e.fence for e in self.events_of[occurrence_id] if e.type in _TERMINAL}
            for index, rewind in _continuations(written, handed_back, settled):
                window = self._at(self.ev.lines[index])
                window.counts["resumed"] += 1
                if rewind:
                    window.add("rewind", f"{what}: {rewind}")

    def _at(self, line: dict[str, Any]) -> Row:
        return self.windows.at(self.real(line))

    def _stale(
        self, occurrence_id: int, what: str, written: list[tuple[int, dict[str, Any]]]
    ) -> None:
        """Overlaps and late writes of one occurrence, each counted once, at its first line."""
        spans: dict[int, tuple[int, int]] = {}
        for index, line in written:
            first, last = spans.get(line["fence"], (index, index))
            spans[line["fence"]] = (min(first, index), max(last, index))
        lost_at = _lease_lost_at(self.events_of[occurrence_id])
        found: dict[str, dict[str, Any]] = {}
        for index, line in written:
            fence = line["fence"]
            later = [span for other, span in spans.items() if other > fence]
            after_event = self.real(line) > lost_at.get(fence, float("inf"))
            if not (after_event or any(start < index for start, _ in later)):
                continue
            column = "overlap" if any(start < index < end for start, end in later) else "late"
            found.setdefault(column, line)
        for column, line in found.items():
            self._at(line).add(
                column,
                f"{what}: fence {line['fence']} on {line.get('host')} wrote"
                f" {line['event']} after its lease was lost",
            )

    def settles(self, stuck_after_s: float) -> None:
        """Lost updates and stuck occurrences, from the kernel's rows and events."""
        for row in self.ev.rows:
            if row.job_id not in self.delivery:
                continue
            events = self.events_of[row.id]
            what = f"{row.job_id} due {row.scheduled_for:.0f} (occurrence {row.id})"
            lost = _lost_update(row, events)
            if lost is not None:
                at, why = lost
                self.windows.at(at).add("lost_update", f"{what}: {why}")
            elif (
                row.status in _UNSETTLED
                and not self._awaits_verdict(row)
                and row.scheduled_for < self.ev.judged_at - stuck_after_s
            ):
                self.windows.at(row.scheduled_for).add(
                    "stuck",
                    f"{what}: {row.status} {self.ev.judged_at - row.scheduled_for:.0f} s after due",
                )

    def _awaits_verdict(self, row: KernelRow) -> bool:
        """In ``needs_adjudication``, or unsettled behind an earlier run of its job that is."""
        since = self.unresolved_since.get(row.job_id)
        return row.status == "needs_adjudication" or (
            since is not None and row.status in _UNSETTLED and row.scheduled_for > since
        )

    def handbacks(self) -> None:
        for handback in self.ev.handbacks:
            window = self.windows.at(handback.at)
            if not handback.occurrence_ids:
                window.add("handback", f"{handback.kind} at {handback.at:.0f} hit no run")
            for occurrence_id in handback.occurrence_ids:
                why = self._not_handed_back(handback, occurrence_id)
                if why:
                    window.add("handback", f"{handback.kind} of occurrence {occurrence_id}: {why}")

    def _not_handed_back(self, handback: Handback, occurrence_id: int) -> str | None:
        types = [e.type for e in self.events_of[occurrence_id]]
        needed = (
            ("occurrence_paused", "occurrence_resumed")
            if handback.kind == "pause"
            else ("occurrence_handed_back",)
        )
        missing = [t for t in needed if t not in types]
        if missing:
            return f"no {' / '.join(missing)} event (events: {', '.join(types)})"
        handed = max(e.fence or 0 for e in self.events_of[occurrence_id] if e.type == needed[0])
        written = [line for _, line in self.lines_of.get(occurrence_id, [])]
        if not any(x["event"] == "end" and x["fence"] > handed for x in written):
            return f"no later run than fence {handed} finished (events: {', '.join(types)})"
        return None


def _lease_lost_at(events: list[KernelEvent]) -> dict[int, float]:
    """When each fence lost its lease, by the kernel's log: the first claim by a later
    fence, or its own run sent for adjudication (an expired at-most-once lease)."""
    lost: dict[int, float] = {}
    fences = sorted({e.fence for e in events if e.fence is not None})
    for fence in fences:
        taken = [
            e.at
            for e in events
            if e.fence is not None
            and (
                (e.type == "occurrence_claimed" and e.fence > fence)
                or (e.type == "occurrence_needs_adjudication" and e.fence == fence)
            )
        ]
        if taken:
            lost[fence] = min(taken)
    return lost


def _lost_update(row: KernelRow, events: list[KernelEvent]) -> tuple[float, str] | None:
    """(when it was acknowledged, why) if the row does not keep a settle the kernel logged."""
    succeeded = [e for e in events if e.type == "occurrence_succeeded"]
    if succeeded:
        again = [e for e in events if e.type == "occurrence_claimed" and e.at > succeeded[0].at]
        if again:
            return succeeded[0].at, f"claimed again at fence {again[0].fence} after it succeeded"
    last = events[-1] if events else None
    if last is not None and last.type in _TERMINAL:
        kept = _TERMINAL[last.type]
        if row.status != kept or (last.fence is not None and row.fence != last.fence):
            return (
                last.at,
                f"{last.type} at fence {last.fence}, row {row.status} at fence {row.fence}",
            )
    return None


def _continuations(
    written: list[tuple[int, dict[str, Any]]],
    handed_back: set[int | None],
    settled: set[int | None],
) -> list[tuple[int, str | None]]:
    """Each run of one occurrence resumed from a checkpoint: (index of its ``start``, how the
    ledger contradicts its checkpoint, if it does).

    A checkpoint ``{"done": k}`` is given right after step k-1, so the last run to write
    step k-1 before the resumed one started is the one that stored it: the resumed run must
    have written nothing before it, and a run that stored it by handing the occurrence back
    (its fence in ``handed_back``) nothing past it; one that stored it with a lease renewal
    and then lost its lease may have gone on (those steps are redone), to its end only
    when its settle never landed (its fence not in ``settled``).
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
        stopped_there = finished[-1] in handed_back
        past = [
            x
            for _, x in earlier
            if x["fence"] == finished[-1]
            and (
                (x["event"] == "end" and (stopped_there or x["fence"] in settled))
                or (stopped_there and x["event"] == "step" and x["step"] >= k)
            )
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
