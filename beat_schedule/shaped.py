"""A recurring schedule bounded by ``start`` / ``end`` and spread by ``jitter``.

Bounds cut the schedule's own instants: none before ``start``, none after ``end`` (both
inclusive). Jitter moves when a firing comes due, not which firing it is: the trigger key
still names the schedule's instant, and the firing comes due ``jitter_offset(job, key)``
later — a value in ``[0, jitter)`` every Beat derives alike, so no two Beats disagree on
when (or whether) a firing is due. Jitter smaller than the shortest gap between firings
(the spec refuses any other) keeps due times in the schedule's order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from itertools import takewhile

from beat_schedule.schedules import (
    MICROSECOND,
    DstPolicy,
    Firing,
    Keyed,
    Schedule,
    ScheduleSpec,
    Timed,
    parse,
)

__all__ = ["Bounded", "Jittered", "jitter_offset", "shaped"]


@dataclass(frozen=True)
class Bounded(Keyed):
    """``inner``'s instants within ``[start, end]`` (None: unbounded on that side)."""

    inner: Schedule
    start: datetime | None
    end: datetime | None

    @property
    def kind(self) -> str:  # type: ignore[override]
        return self.inner.kind

    @property
    def zone(self) -> tzinfo:
        return self.inner.zone

    def instants(self, after: datetime) -> Iterator[datetime]:
        if self.start is not None:
            after = max(after, self.start - MICROSECOND)
        for at in self.inner.instants(after):
            if self.end is not None and at > self.end:
                return
            yield at

    def count(self, lo: datetime, hi: datetime) -> int:
        lo = lo if self.start is None else max(lo, self.start)
        hi = hi if self.end is None else min(hi, self.end + MICROSECOND)
        return self.inner.count(lo, hi) if lo < hi else 0


def jitter_offset(job_id: str, trigger_key: str, jitter_s: float) -> timedelta:
    """How much later than its instant the firing ``trigger_key`` of ``job_id`` comes due:
    whole milliseconds in ``[0, jitter_s)``, from a hash of the two (no shared state)."""
    span_ms = round(jitter_s * 1000)
    if span_ms <= 0:
        return timedelta()
    digest = hashlib.sha256(f"{job_id}\x00{trigger_key}".encode()).digest()
    return timedelta(milliseconds=int.from_bytes(digest[:8], "big") % span_ms)


@dataclass(frozen=True)
class Jittered:
    """``inner``'s firings, each due its :func:`jitter_offset` later, keyed as before."""

    inner: Timed
    job_id: str
    jitter_s: float

    @property
    def kind(self) -> str:
        return self.inner.kind

    @property
    def zone(self) -> tzinfo:
        return self.inner.zone

    def _due(self, firing: Firing) -> Firing:
        offset = jitter_offset(self.job_id, firing.trigger_key, self.jitter_s)
        return Firing(firing.trigger_key, firing.at + offset)

    def firings(self, after: datetime) -> Iterator[Firing]:
        """Firings due strictly after ``after``, ascending: those whose instant lies past
        ``after - jitter`` and whose offset carries them past ``after``."""
        for firing in self.inner.firings(after - timedelta(seconds=self.jitter_s)):
            due = self._due(firing)
            if due.at > after:
                yield due

    def count(self, lo: datetime, hi: datetime) -> int:
        """Firings due in ``[lo, hi)``: those whose instant lies in ``[lo - jitter, hi)``,
        less those just before ``lo`` still due before it and those just before ``hi``
        due at or after it."""
        spread = timedelta(seconds=self.jitter_s)
        total = self.inner.count(lo - spread, hi)
        total -= sum(self._due(f).at < lo for f in self._between(lo - spread, lo))
        total -= sum(self._due(f).at >= hi for f in self._between(hi - spread, hi))
        return total

    def _between(self, lo: datetime, hi: datetime) -> Iterator[Firing]:
        return takewhile(lambda f: f.at < hi, self.inner.firings(lo - MICROSECOND))


def shaped(
    schedule: ScheduleSpec, dst: DstPolicy, anchor: datetime, *, job_id: str | None
) -> Timed | None:
    """The schedule Beat plans over: :func:`~beat_schedule.schedules.parse`, then the
    bounds and jitter the schedule names. ``job_id`` seeds the jitter (needed with one)."""
    sched = parse(schedule, dst, anchor)
    if sched is None or schedule is None:
        return sched
    timed: Timed = sched
    start, end = schedule.get("start"), schedule.get("end")
    if start is not None or end is not None:
        timed = Bounded(sched, _instant(start), _instant(end))
    jitter = schedule.get("jitter")
    if jitter:
        if job_id is None:
            raise ValueError("a jittered schedule needs the job id its offsets derive from")
        timed = Jittered(timed, job_id, float(jitter))
    return timed


def _instant(value: object) -> datetime | None:
    if value is None:
        return None
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
