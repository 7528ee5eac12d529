"""DST policy over 2025–2030 in five zones, checked against sequences built from the
zones' published rules (not from zoneinfo's own answers).

For every day of the range the test writes down the local wall time each firing must
show — hour, minute and fold (0 = first pass of a repeated hour, 1 = second) — from
the rule "second Sunday of March at 02:00" and the like, then compares the firings'
actual local wall times with that list. Equal lists mean: exactly one firing per
intended firing, the policy applied on the transition days, nothing else changed.
"""

from __future__ import annotations

import calendar
import random
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from beat_schedule.timing import Firing, firings_between, plan_due

FIRST_DAY = date(2025, 1, 1)
DAYS = 2191  # 2025-01-01 .. 2030-12-31: six years, one of them (2028) leap
ANCHOR = datetime(2020, 1, 1, tzinfo=UTC)

Wall = tuple[date, int, int, int]  # local date, hour, minute, fold


def _sunday(year: int, month: int, nth: int) -> date:
    """The nth Sunday of a month; nth = -1 is the last one."""
    sundays = [week[calendar.SUNDAY] for week in calendar.monthcalendar(year, month) if week[6]]
    return date(year, month, sundays[nth - 1 if nth > 0 else nth])


# zone -> (day of the spring gap, its missing wall hour, day of the fall-back fold,
# its repeated wall hour), each gap and fold one hour long.
RULES: dict[str, tuple[Callable[[int], date], int, Callable[[int], date], int] | None] = {
    "America/New_York": (lambda y: _sunday(y, 3, 2), 2, lambda y: _sunday(y, 11, 1), 1),
    "Europe/Berlin": (lambda y: _sunday(y, 3, -1), 2, lambda y: _sunday(y, 10, -1), 2),
    "Europe/London": (lambda y: _sunday(y, 3, -1), 1, lambda y: _sunday(y, 10, -1), 1),
    "Australia/Sydney": (lambda y: _sunday(y, 10, 1), 2, lambda y: _sunday(y, 4, 1), 2),
    "Asia/Kolkata": None,
}
ZONES = list(RULES)
POLICIES = [(gap, fold) for gap in ("shift_forward", "skip") for fold in ("first", "last", "both")]


def _transitions(zone: str) -> tuple[dict[date, int], dict[date, int]]:
    """{gap day: missing hour}, {fold day: repeated hour} for 2025–2030."""
    rule = RULES[zone]
    if rule is None:
        return {}, {}
    gap_day, gap_hour, fold_day, fold_hour = rule
    years = range(2025, 2031)
    return {gap_day(y): gap_hour for y in years}, {fold_day(y): fold_hour for y in years}


ALL_DAYS = [FIRST_DAY + timedelta(days=d) for d in range(DAYS)]


def _intended(
    zone: str, hours: list[int], minute: int, gap: str, fold: str, days: list[date] = ALL_DAYS
) -> list[Wall]:
    """The local wall times a job at ``hours``:``minute`` must fire at on ``days``."""
    gaps, folds = _transitions(zone)
    walls: list[Wall] = []
    for day in days:
        for hour in hours:
            if gaps.get(day) == hour:
                # A missing wall time fires at the gap's end (hour + 1, :00) unless the
                # job fires at that wall time anyway; skip drops it.
                if gap == "shift_forward" and (hour + 1) not in hours:
                    walls.append((day, hour + 1, 0, 0))
            elif folds.get(day) == hour:
                walls.extend(
                    (day, hour, minute, f) for f in {"first": [0], "last": [1]}.get(fold, [0, 1])
                )
            else:
                walls.append((day, hour, minute, 0))
    return walls


def _bounds(zone: str) -> tuple[datetime, datetime]:
    tz = ZoneInfo(zone)
    start = datetime.combine(FIRST_DAY, time(), tz).astimezone(UTC)
    end = datetime.combine(FIRST_DAY + timedelta(days=DAYS), time(), tz).astimezone(UTC)
    return start, end - timedelta(microseconds=1)


def _walls(zone: str, firings: list[Firing]) -> list[Wall]:
    tz = ZoneInfo(zone)
    local = [f.at.astimezone(tz) for f in firings]
    return [(t.date(), t.hour, t.minute, t.fold) for t in local]


def _assert_ordered(firings: list[Firing]) -> None:
    assert all(a.at < b.at for a, b in zip(firings, firings[1:], strict=False))
    assert len({f.trigger_key for f in firings}) == len(firings)


def _hourly_count(zone: str, fold: str) -> int:
    """The closed form, as a second opinion on the walls list: each gap loses an
    hour under either gap policy (a shifted 02:00 is the 03:00 firing), and each fold
    adds one under ``both``."""
    gaps, folds = _transitions(zone)
    return DAYS * 24 - len(gaps) + (len(folds) if fold == "both" else 0)


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize(("gap", "fold"), POLICIES)
def test_daily_0230_fires_once_per_intended_firing(zone: str, gap: str, fold: str) -> None:
    schedule = {"cron": "30 2 * * *", "timezone": zone}
    start, end = _bounds(zone)
    firings = firings_between(
        schedule, {"gap": gap, "fold": fold}, start, end, anchor=ANCHOR, limit=10_000
    )
    _assert_ordered(firings)
    assert _walls(zone, firings) == _intended(zone, [2], 30, gap, fold)
    gaps, folds = _transitions(zone)
    gap_days = sum(1 for h in gaps.values() if h == 2)
    fold_days = sum(1 for h in folds.values() if h == 2)
    expected = DAYS - (gap_days if gap == "skip" else 0) + (fold_days if fold == "both" else 0)
    assert len(firings) == expected


@pytest.mark.parametrize("zone", ZONES)
def test_daily_noon_fires_every_day(zone: str) -> None:
    start, end = _bounds(zone)
    firings = firings_between(
        {"cron": "0 12 * * *", "timezone": zone},
        {"gap": "skip", "fold": "both"},
        start,
        end,
        anchor=ANCHOR,
        limit=10_000,
    )
    assert len(firings) == 2191
    assert {t.hour for t in (f.at.astimezone(ZoneInfo(zone)) for f in firings)} == {12}
    _assert_ordered(firings)


# Walking six years hourly costs ~2 s a run (croniter's per-step cost), so two zones
# with differently placed gaps and folds are walked end to end; every zone is counted
# end to end below (test_missed_count_...), and every zone and policy is walked on
# the weeks around each transition, the only place where policies differ.
@pytest.mark.parametrize(
    ("zone", "gap", "fold"),
    [("America/New_York", "shift_forward", "first"), ("Europe/Berlin", "skip", "both")],
)
def test_hourly_fires_once_per_intended_firing(zone: str, gap: str, fold: str) -> None:
    start, end = _bounds(zone)
    firings = firings_between(
        {"cron": "0 * * * *", "timezone": zone},
        {"gap": gap, "fold": fold},
        start,
        end,
        anchor=ANCHOR,
        limit=100_000,
    )
    _assert_ordered(firings)
    assert _walls(zone, firings) == _intended(zone, list(range(24)), 0, gap, fold)
    assert len(firings) == _hourly_count(zone, fold)


def _transition_weeks(zone: str) -> list[list[date]]:
    """The seven days centred on each gap and fold day (one plain week for Kolkata)."""
    gaps, folds = _transitions(zone)
    centres = sorted([*gaps, *folds]) or [date(2027, 3, 28)]
    return [[c + timedelta(days=d) for d in range(-3, 4)] for c in centres]


def _span(zone: str, days: list[date]) -> tuple[datetime, datetime]:
    """UTC instants from local midnight of the first day to just before the last ends."""
    tz = ZoneInfo(zone)
    start = datetime.combine(days[0], time(), tz).astimezone(UTC)
    end = datetime.combine(days[-1] + timedelta(days=1), time(), tz).astimezone(UTC)
    return start, end - timedelta(seconds=1)


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize(("gap", "fold"), POLICIES)
def test_hourly_policies_around_every_transition(zone: str, gap: str, fold: str) -> None:
    schedule = {"cron": "0 * * * *", "timezone": zone}
    weeks = _transition_weeks(zone)
    firings: list[Firing] = []
    for week in weeks:
        start, end = _span(zone, week)
        firings += firings_between(
            schedule, {"gap": gap, "fold": fold}, start, end, anchor=ANCHOR, limit=1000
        )
    _assert_ordered(firings)
    days = [day for week in weeks for day in week]
    assert _walls(zone, firings) == _intended(zone, list(range(24)), 0, gap, fold, days)


def _drive_beat(
    schedule: dict[str, str], dst: dict[str, str], start: datetime, end: datetime, seed: int
) -> list[Firing]:
    """Tick as Beat does: wake a little after each cursor, sometimes also early."""
    rng = random.Random(seed)
    policies = ["latest", "all", "none"]
    fired: list[Firing] = []
    cursor: Firing | None = None
    now = start
    while True:
        plan = plan_due(
            schedule, dst, rng.choice(policies), 3600.0, cursor=cursor, now=now, anchor=start
        )
        assert plan.missed == [] and plan.missed_count == 0
        fired += plan.fire
        assert plan.next_cursor is not None
        if plan.next_cursor.at > end:
            return fired
        if cursor is not None and plan.next_cursor.at - cursor.at > timedelta(minutes=2):
            early = plan_due(
                schedule,
                dst,
                "latest",
                None,
                cursor=plan.next_cursor,
                now=plan.next_cursor.at - timedelta(seconds=rng.uniform(1, 60)),
                anchor=start,
            )
            assert early.fire == [] and early.next_cursor == plan.next_cursor
        cursor = plan.next_cursor
        now = cursor.at + timedelta(seconds=rng.uniform(0, 14))


@pytest.mark.parametrize(("gap", "fold"), [("shift_forward", "first"), ("skip", "both")])
def test_beat_ticks_fire_daily_job_exactly_as_intended(gap: str, fold: str) -> None:
    zone = "Europe/Berlin"
    schedule = {"cron": "30 2 * * *", "timezone": zone}
    dst = {"gap": gap, "fold": fold}
    start, end = _bounds(zone)
    fired = _drive_beat(schedule, dst, start, end, seed=7)
    _assert_ordered(fired)
    assert fired == firings_between(schedule, dst, start, end, anchor=ANCHOR, limit=10_000)
    assert _walls(zone, fired) == _intended(zone, [2], 30, gap, fold)


@pytest.mark.parametrize(("gap", "fold"), POLICIES)
def test_beat_ticks_fire_hourly_job_exactly_as_intended(gap: str, fold: str) -> None:
    zone = "Europe/Berlin"
    schedule = {"cron": "0 * * * *", "timezone": zone}
    dst = {"gap": gap, "fold": fold}
    weeks = _transition_weeks(zone)[4:6]  # 2027's spring and autumn
    fired: list[Firing] = []
    for week in weeks:
        start, end = _span(zone, week)
        fired += _drive_beat(schedule, dst, start, end, seed=week[0].toordinal())
    _assert_ordered(fired)
    days = [day for week in weeks for day in week]
    assert _walls(zone, fired) == _intended(zone, list(range(24)), 0, gap, fold, days)


ROTATION = [
    ("America/New_York", "shift_forward", "first"),
    ("Europe/Berlin", "skip", "both"),
    ("Europe/London", "shift_forward", "last"),
    ("Australia/Sydney", "skip", "first"),
    ("Asia/Kolkata", "shift_forward", "both"),
]


@pytest.mark.parametrize(("zone", "gap", "fold"), ROTATION)
def test_missed_count_over_six_years_matches_the_rules(zone: str, gap: str, fold: str) -> None:
    # Beat down for the whole range: the count is computed a day at a time, and must
    # still see each transition day's missing and repeated hours.
    start, end = _bounds(zone)
    now = end + timedelta(microseconds=1)  # local midnight 2031-01-01, on time
    plan = plan_due(
        {"cron": "0 * * * *", "timezone": zone},
        {"gap": gap, "fold": fold},
        "none",
        None,
        cursor=Firing("cron:start", start),
        now=now,
        anchor=ANCHOR,
    )
    assert [f.at for f in plan.fire] == [now]
    assert plan.missed_count == _hourly_count(zone, fold)
    assert len(plan.missed) == 1000
    assert plan.missed[0].at == start
