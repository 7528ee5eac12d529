"""When Beat fires a job: the next firings, previews, trigger keys, and the catch-up plan
after Beat was down. Pure functions over :mod:`beat_schedule.schedules` (which says how
cron, DST policies, intervals and one-shots yield instants); datetimes in and out are
timezone-aware, outputs UTC unless a name says "local".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import chain, islice, takewhile

from beat_schedule.schedules import (
    MICROSECOND,
    At,
    DstPolicy,
    Firing,
    ScheduleSpec,
    aware_utc,
    firings,
    format_key,
    latest_before,
)
from beat_schedule.shaped import shaped
from kernel import EARLIEST_INSTANT, LATEST_INSTANT, InvalidArgument

__all__ = [
    "ScheduleSpec",
    "DstPolicy",
    "Firing",
    "Plan",
    "trigger_key",
    "next_firing",
    "firings_between",
    "plan_due",
    "preview",
]

_KINDS = ("cron", "every", "at")
_REASONS = {"latest": "catchup_latest", "all": "outside_catchup_window", "none": "catchup_none"}


@dataclass(frozen=True)
class Plan:
    """What one Beat tick should do for one job (see :func:`plan_due`)."""

    #: Create occurrences for these, ascending.
    fire: list[Firing]
    #: Record these as skipped with ``missed_reason`` (the oldest ``max_records``).
    missed: list[Firing]
    #: ``catchup_latest`` | ``outside_catchup_window`` | ``catchup_none``, by policy.
    missed_reason: str
    #: The true number of missed firings; ``missed`` may hold fewer.
    missed_count: int
    #: The next firing not yet planned; None when the schedule is exhausted.
    next_cursor: Firing | None


def _horizon(name: str, value: datetime) -> datetime:
    """``value`` (aware) brought inside the years schedules fire in: asking from year 1 or
    up to 9999 is asking over the whole horizon, and no arithmetic past it can overflow."""
    return min(max(aware_utc(name, value), EARLIEST_INSTANT), LATEST_INSTANT)


def trigger_key(kind: str, at: datetime) -> str:
    """Name a firing: ``cron:2026-11-29T12:00:00Z`` (UTC; microseconds only if any).

    ``kind`` is ``cron``, ``every`` or ``at`` (``in`` schedules fire as ``at``).
    Raises InvalidArgument for another kind or a naive ``at``.
    """
    if kind not in _KINDS:
        raise InvalidArgument("kind", f"must be one of {', '.join(_KINDS)}", value=kind)
    return format_key(kind, aware_utc("at", at))


def next_firing(
    schedule: ScheduleSpec,
    dst: DstPolicy,
    after: datetime,
    *,
    anchor: datetime,
    job_id: str | None = None,
) -> Firing | None:
    """The first firing strictly after ``after``; None if there is none.

    ``anchor`` is the job's definition time, which an ``in`` schedule counts from;
    ``job_id`` seeds a schedule's ``jitter`` (a firing's ``at`` is then when it comes due,
    its trigger key still the schedule's instant), as in every function here.
    """
    sched = shaped(schedule, dst, anchor, job_id=job_id)
    return None if sched is None else next(firings(sched, _horizon("after", after)), None)


def firings_between(
    schedule: ScheduleSpec,
    dst: DstPolicy,
    start: datetime,
    end: datetime,
    *,
    anchor: datetime,
    limit: int,
    job_id: str | None = None,
) -> list[Firing]:
    """Firings with ``start <= at <= end``, ascending, at most ``limit`` of them."""
    sched = shaped(schedule, dst, anchor, job_id=job_id)
    if sched is None:
        return []
    end = _horizon("end", end)
    upcoming = firings(sched, _horizon("start", start) - MICROSECOND)
    return list(islice(takewhile(lambda f: f.at <= end, upcoming), max(limit, 0)))


def preview(
    schedule: ScheduleSpec,
    dst: DstPolicy,
    after: datetime,
    n: int,
    *,
    anchor: datetime,
    job_id: str | None = None,
) -> list[tuple[Firing, datetime]]:
    """The next ``n`` firings after ``after``, each with its local wall time.

    Local times are aware, in the schedule's zone (UTC for every/at/in), so a
    repeated wall time shows which of its offsets fired.
    """
    sched = shaped(schedule, dst, anchor, job_id=job_id)
    if sched is None:
        return []
    ahead = islice(firings(sched, _horizon("after", after)), max(n, 0))
    return [(f, f.at.astimezone(sched.zone)) for f in ahead]


def plan_due(
    schedule: ScheduleSpec,
    dst: DstPolicy,
    catchup_policy: str,
    catchup_window_s: float | None,
    *,
    cursor: Firing | None,
    now: datetime,
    anchor: datetime,
    grace_s: float = 15.0,
    max_fire: int = 1000,
    max_records: int = 1000,
    job_id: str | None = None,
) -> Plan:
    """Split the due firings (``cursor.at <= at <= now``) into fire and missed.

    On-time firings (``now - at <= grace_s``) fire. Late ones follow the policy:
    ``all`` fires those within ``catchup_window_s`` (None: all) and misses older ones;
    ``latest`` fires only the most recent due firing and misses every other, those
    within the grace included, once any was late (Beat was down); ``none`` misses the
    late ones.

    ``cursor`` None means never planned: a recurring schedule starts at its first
    firing at or after ``anchor`` (nothing from before the job existed is owed); a
    one-shot starts at its single firing even if past, so the policy fires or misses
    it rather than dropping it silently. Only ``cursor.at`` is read.

    Bounded whatever the downtime: at most ``max_fire`` fire (``next_cursor`` then
    points at the first left over, for the next call), at most ``max_records`` missed
    are listed, and ``missed_count`` is exact without walking them (arithmetic for
    ``every``, whole days at a time for cron).

    Raises:
        InvalidArgument: unknown policy, ``max_fire`` < 1, bad schedule or DST
            policy, naive datetime.
    """
    reason = _REASONS.get(catchup_policy)
    if reason is None:
        raise InvalidArgument("catchup.policy", "must be latest, all or none", value=catchup_policy)
    if max_fire < 1:
        raise InvalidArgument("max_fire", "must be at least 1", value=max_fire)
    now = _horizon("now", now)
    sched = shaped(schedule, dst, anchor, job_id=job_id)
    if sched is None:
        return Plan([], [], reason, 0, None)
    if cursor is not None:
        lower = aware_utc("cursor.at", cursor.at)
    else:
        lower = sched.at if isinstance(sched, At) else aware_utc("anchor", anchor)
    walk = firings(sched, lower - MICROSECOND)
    head = next(walk, None)
    if head is None or head.at > now:
        return Plan([], [], reason, 0, head)

    grace = timedelta(seconds=grace_s)
    if catchup_policy != "all":
        start = max(head.at, now - grace)
    elif catchup_window_s is None:
        start = head.at
    else:
        start = max(head.at, now - max(grace, timedelta(seconds=catchup_window_s)))

    fire: list[Firing] = []
    # On time (the usual tick), firing starts at head: go on walking, no second search.
    upcoming = chain([head], walk) if start == head.at else firings(sched, start - MICROSECOND)
    next_cursor = next(upcoming, None)
    while next_cursor is not None and next_cursor.at <= now and len(fire) < max_fire:
        fire.append(next_cursor)
        next_cursor = next(upcoming, None)

    missed_until = start
    if not fire and catchup_policy == "latest" and head.at < start:
        latest = latest_before(sched, head, start)
        fire.append(latest)
        missed_until = latest.at
    elif catchup_policy == "latest" and head.at < start and len(fire) > 1 and len(fire) < max_fire:
        # Beat was down: the firings inside the grace are late too, and "latest" runs
        # only the most recent of them (each earlier one would overlap it).
        missed_until = fire[-1].at
        fire = fire[-1:]
    if missed_until <= head.at:
        return Plan(fire, [], reason, 0, next_cursor)
    missed = takewhile(lambda f: f.at < missed_until, firings(sched, head.at - MICROSECOND))
    records = list(islice(missed, max(max_records, 0)))
    return Plan(fire, records, reason, sched.count(head.at, missed_until), next_cursor)
