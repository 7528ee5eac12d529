"""What a schedule is and the instants it yields: cron in a zone under a DST policy,
intervals, one-shots. Pure functions; datetimes in and out are timezone-aware, UTC
unless a name says "local". :mod:`beat_schedule.timing` plans Beat's ticks over them.

Cron is evaluated on wall-clock times: croniter walks naive local times (a calendar
with no zone; its own zone handling fires repeated times twice and moves gap times by
the offset change), and the DST policy maps each wall time to UTC: an ordinary one to
its instant; a repeated one (fall back) to its earlier (``fold: first``), later
(``last``) or both instants; a missing one (spring forward) to the first instant
after the gap (``gap: shift_forward``: 02:30 in a 02:00→03:00 gap fires at 03:00) or
to nothing (``skip``). An expression with a wildcard hour is not moved to the gap's end:
as in Celery (whose datetime arithmetic reads the missing time with the offset from
before the gap) and cron, its missing times fall on the next hour's own firings, so the
missing hour is skipped (``minute=17``: 01:17, then 03:17, no extra 03:00).

Output is strictly increasing with one trigger key per instant because "the earliest
instant whose wall time is ≥ w" and "the latest whose wall time is ≤ w" both grow
with w, every policy picks one of the two, and the merge drops any instant not after
the previous one — which also folds a shifted gap firing into a real one at the same
instant (an hourly job's 02:00 → 03:00 fires once at 03:00).

``every`` fires at whole multiples of the interval since the Unix epoch, so all Beats
agree on instants and trigger keys without shared state.
"""

from __future__ import annotations

import functools
import heapq
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from itertools import takewhile
from typing import Any, ClassVar, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter

from kernel import EARLIEST_INSTANT, LATEST_INSTANT, Firing, InvalidArgument

__all__ = [
    "ScheduleSpec",
    "DstPolicy",
    "Firing",
    "Schedule",
    "Keyed",
    "Timed",
    "Cron",
    "Every",
    "At",
    "MICROSECOND",
    "parse",
    "firings",
    "latest_before",
    "aware_utc",
    "format_key",
]

#: A normalised schedule: ``{"cron", "timezone"}`` (plus ``"day_match": "all"`` when a
#: day must match both the day-of-month and the day-of-week field, as in Celery's
#: ``crontab``; standard cron fires when either matches), ``{"every": s}``, ``{"at": iso}``,
#: ``{"in": s}``, or None (manual or chained only: never fires).
ScheduleSpec = Mapping[str, Any] | None
#: ``{"gap": "shift_forward"|"skip", "fold": "first"|"last"|"both"}``; None or a
#: missing key means ``shift_forward`` / ``first``. Only cron reads it.
DstPolicy = Mapping[str, str] | None

MICROSECOND = timedelta(microseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_GAPS = ("shift_forward", "skip")
_FOLDS = ("first", "last", "both")
# croniter's expanded field index -> number of values '*' stands for, for the fields
# that pick a time of day (minute, hour, and the optional sixth field, seconds).
_TIME_FIELDS = ((0, 60), (1, 24), (5, 60))


class Keyed:
    """A schedule whose firings are named by their own instants (all but a jittered one)."""

    kind: ClassVar[str]

    def instants(self, after: datetime) -> Iterator[datetime]:
        raise NotImplementedError

    def firings(self, after: datetime) -> Iterator[Firing]:
        """Firings strictly after ``after``, ascending, within the planner's horizon
        (:data:`~kernel.spec.durations.EARLIEST_INSTANT` to ``LATEST_INSTANT``: a schedule
        has no firing outside it, so no walk leaves the years ``datetime`` holds)."""
        if after >= LATEST_INSTANT:
            return iter(())
        walk = self.instants(max(after, EARLIEST_INSTANT - MICROSECOND))
        ahead = takewhile(lambda at: at <= LATEST_INSTANT, walk)
        return (Firing(format_key(self.kind, at), at) for at in ahead)


@dataclass(frozen=True)
class Cron(Keyed):
    """A cron expression read as wall-clock times in ``zone``, under a DST policy."""

    expr: str
    zone: tzinfo
    gap: str
    fold: str
    #: True: a day fires if its day of month OR its weekday matches (Vixie cron);
    #: False: both must match (Celery's crontab).
    day_or: bool
    #: The hour field is ``*``: a missing wall time is not shifted to the gap's end.
    every_hour: bool = False
    kind: ClassVar[str] = "cron"

    def instants(self, after: datetime) -> Iterator[datetime]:
        """UTC instants strictly after ``after`` (UTC), ascending, no repeats."""
        # A firing's wall time is at least its instant plus the smallest offset in
        # force near it, so starting there misses nothing even with a fold ahead.
        smallest = min(_offset(after + timedelta(days=d), self.zone) for d in (0, 1, 2))
        walls = croniter(
            self.expr,
            (after + smallest).replace(tzinfo=None, microsecond=0),
            day_or=self.day_or,
        )
        pending: list[datetime] = []
        last = after
        while True:
            try:
                wall = walls.get_next(datetime)
            except CroniterBadDateError:  # no later date matches (e.g. 30 Feb)
                break
            floor, hits = self._map(wall)
            for hit in hits:
                heapq.heappush(pending, hit)
            # Later wall times map to instants >= floor, so anything up to it is final.
            while pending and pending[0] <= floor:
                hit = heapq.heappop(pending)
                if hit > last:
                    last = hit
                    yield hit
        yield from (hit for hit in sorted(pending) if hit > last)

    def _map(self, wall: datetime) -> tuple[datetime, tuple[datetime, ...]]:
        """(earliest instant whose wall time is >= wall, the instants the policy fires)."""
        earlier = (wall - _wall_offset(wall, self.zone, 0)).replace(tzinfo=UTC)
        later = (wall - _wall_offset(wall, self.zone, 1)).replace(tzinfo=UTC)
        if earlier == later:
            return earlier, (earlier,)
        if earlier < later:  # the wall time occurs twice; fold=0 is the first pass
            chosen = {"first": (earlier,), "last": (later,), "both": (earlier, later)}
            return earlier, chosen[self.fold]
        # The wall time is in a gap: zoneinfo reads fold=0 with the offset from before
        # the gap (a later instant) and fold=1 with the offset after it.
        end = _gap_end(self.zone, later, earlier)
        if self.gap == "skip":
            return end, ()
        # Read with the offset from before the gap, as Celery does: for a wildcard hour
        # that is another wall time's own firing, which the merge then drops.
        return end, ((earlier,) if self.every_hour else (end,))

    def count(self, lo: datetime, hi: datetime) -> int:
        """How many firings fall in ``[lo, hi)``, skipping whole plain days at once."""
        fields = croniter(self.expr, _EPOCH).expanded
        per_day = 1
        for index, full in _TIME_FIELDS:
            if index < len(fields):
                per_day *= full if "*" in fields[index] else len(fields[index])
        total, after = 0, lo - MICROSECOND
        upcoming = self.instants(after)
        while True:
            at = next(upcoming, None)
            if at is None or at >= hi:
                return total
            day = _plain_day(self.zone, at.astimezone(self.zone).date())
            if day is not None and day[0] > after and day[1] <= hi:
                # `at` opens a day of one offset lying wholly in range: it holds every
                # time of day the expression names, each firing exactly once.
                total += per_day
                after = day[1] - MICROSECOND
                upcoming = self.instants(after)
            else:
                total += 1
                after = at


@dataclass(frozen=True)
class Every(Keyed):
    """Whole multiples of ``step_us`` microseconds since the Unix epoch."""

    step_us: int
    kind: ClassVar[str] = "every"
    zone: ClassVar[tzinfo] = UTC

    def instants(self, after: datetime) -> Iterator[datetime]:
        k = _micros(after) // self.step_us + 1
        while True:
            yield _EPOCH + timedelta(microseconds=k * self.step_us)
            k += 1

    def count(self, lo: datetime, hi: datetime) -> int:
        return max(0, -(-_micros(hi) // self.step_us) - -(-_micros(lo) // self.step_us))


@dataclass(frozen=True)
class At(Keyed):
    """A single firing (``at``, or ``in`` resolved against the anchor)."""

    at: datetime
    kind: ClassVar[str] = "at"
    zone: ClassVar[tzinfo] = UTC

    def instants(self, after: datetime) -> Iterator[datetime]:
        if self.at > after:
            yield self.at

    def count(self, lo: datetime, hi: datetime) -> int:
        return int(lo <= self.at < hi)


Schedule = Cron | Every | At


class Timed(Protocol):
    """What Beat plans over: a schedule, or one bounded or jittered
    (:mod:`beat_schedule.shaped`)."""

    @property
    def kind(self) -> str: ...

    @property
    def zone(self) -> tzinfo: ...

    def firings(self, after: datetime) -> Iterator[Firing]: ...

    def count(self, lo: datetime, hi: datetime) -> int: ...


def parse(schedule: ScheduleSpec, dst: DstPolicy, anchor: datetime) -> Schedule | None:
    if schedule is None:
        return None
    if "cron" in schedule:
        policy = {"gap": "shift_forward", "fold": "first", **(dst or {})}
        zone = str(schedule.get("timezone") or "UTC")
        day_or = schedule.get("day_match", "any") != "all"
        return _cron(str(schedule["cron"]), zone, policy["gap"], policy["fold"], day_or)
    if "every" in schedule:
        step_us = round(float(schedule["every"]) * 1_000_000)
        if step_us <= 0:
            raise InvalidArgument("schedule.every", "must be a positive number of seconds")
        return Every(step_us)
    if "at" in schedule:
        value = schedule["at"]
        try:
            when = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
        except ValueError as exc:
            raise InvalidArgument("schedule.at", "not an ISO 8601 time", value=value) from exc
        when = aware_utc("schedule.at", when)
        if not EARLIEST_INSTANT <= when <= LATEST_INSTANT:  # stored before apply refused it
            raise InvalidArgument("schedule.at", "is outside the years Beat plans", value=value)
        return At(when)
    if "in" in schedule:
        return At(aware_utc("anchor", anchor) + timedelta(seconds=float(schedule["in"])))
    raise InvalidArgument("schedule", "expected one of cron, every, at, in")


@functools.lru_cache(maxsize=1024)
def _cron(expr: str, zone: str, gap: str, fold: str, day_or: bool) -> Cron:
    # Cached: Beat re-plans the same few schedules every tick, and validating an
    # expression costs as much as evaluating it.
    if gap not in _GAPS:
        raise InvalidArgument("dst.gap", f"must be one of {', '.join(_GAPS)}", value=gap)
    if fold not in _FOLDS:
        raise InvalidArgument("dst.fold", f"must be one of {', '.join(_FOLDS)}", value=fold)
    if not croniter.is_valid(expr):
        raise InvalidArgument("schedule.cron", "not a valid cron expression", value=expr)
    try:
        tz = ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidArgument("schedule.timezone", "unknown IANA time zone", value=zone) from exc
    every_hour = croniter(expr, _EPOCH).expanded[1] == ["*"]
    return Cron(expr, tz, gap, fold, day_or, every_hour)


def firings(sched: Timed, after: datetime) -> Iterator[Firing]:
    return sched.firings(after)


def latest_before(sched: Timed, head: Firing, hi: datetime) -> Firing:
    """The latest firing in ``[head.at, hi)``, looking back from ``hi`` over doubling
    windows: the cost follows the gap before ``hi``, not the downtime."""
    span = timedelta(seconds=1)
    while True:
        probe = max(head.at, hi - span)
        latest = None
        for firing in firings(sched, probe - MICROSECOND):
            if firing.at >= hi:
                break
            latest = firing
        if latest is not None:  # always so once probe reaches head.at
            return latest
        span *= 2


def _gap_end(zone: tzinfo, before: datetime, after: datetime) -> datetime:
    """The first instant in ``(before, after]`` whose UTC offset differs from ``before``'s."""
    offset = _offset(before, zone)
    low, high = math.floor(before.timestamp()), math.ceil(after.timestamp())
    # tzdb transitions fall on whole seconds, so bisecting seconds finds the exact one.
    while high - low > 1:
        mid = (low + high) // 2
        if datetime.fromtimestamp(mid, zone).utcoffset() == offset:
            low = mid
        else:
            high = mid
    return datetime.fromtimestamp(high, UTC)


def _plain_day(zone: tzinfo, day: date) -> tuple[datetime, datetime] | None:
    """UTC bounds of local ``day`` if one offset holds from just before it to its end
    (checked at the ends: the tz database has at most one change per day)."""
    start = datetime.combine(day, time())
    end = start + timedelta(days=1)
    offsets = {_wall_offset(w, zone, fold) for w in (start, end) for fold in (0, 1)}
    if len(offsets) != 1:
        return None
    offset = offsets.pop()
    begin = (start - offset).replace(tzinfo=UTC)
    # A gap ending exactly at midnight leaves the day's start shifted from the day before.
    if _offset(begin - timedelta(seconds=1), zone) != offset:
        return None
    return begin, (end - offset).replace(tzinfo=UTC)


# A datetime in a concrete zone always has an offset; `or timedelta()` only narrows
# the type (and a zero offset is timedelta() anyway).
def _wall_offset(wall: datetime, zone: tzinfo, fold: int) -> timedelta:
    return wall.replace(tzinfo=zone, fold=fold).utcoffset() or timedelta()


def _offset(instant: datetime, zone: tzinfo) -> timedelta:
    return instant.astimezone(zone).utcoffset() or timedelta()


def aware_utc(name: str, value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidArgument(name, "must be timezone-aware", value=value.isoformat())
    return value.astimezone(UTC)


def _micros(at: datetime) -> int:
    return (at - _EPOCH) // MICROSECOND


def format_key(kind: str, at: datetime) -> str:
    spec = "microseconds" if at.microsecond else "seconds"
    return f"{kind}:{at.replace(tzinfo=None).isoformat(timespec=spec)}Z"
