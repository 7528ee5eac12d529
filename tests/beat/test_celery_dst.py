"""A ``beat_schedule`` crontab fires where Celery Beat fires it, across both DST changes.

Celery's own ``ScheduleEntry`` is driven the way ``celery beat`` drives it (ask
``is_due``, sleep what it answers, at most ``beat_max_loop_interval``) on a simulated
clock, over a week around each of the year's two DST changes in three zones, for a
corpus of schedules written after the patterns public projects document (hourly
cleanups, nightly reports, quarter-hourly syncs, weekday mornings, monthly bills). The
kernel plans the same entries through the spec the sync writes.

One difference is the kernel's by design: a fixed-hour wall time that a spring-forward
gap removes fires at the gap's end under the job's ``dst.gap`` policy
(``shift_forward``), where Celery's datetime arithmetic moves it by the gap's length.
Those firings are listed apart and checked to be exactly that.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from celery.beat import ScheduleEntry
from celery.schedules import crontab

from beat_schedule.sync import entry_to_spec
from beat_schedule.timing import firings_between
from kernel.spec.jobspec import validate_job_spec

#: Each zone with the UTC starts of a week around its spring-forward and its fall-back.
WEEKS = {
    "America/Los_Angeles": (datetime(2026, 3, 5, tzinfo=UTC), datetime(2026, 10, 29, tzinfo=UTC)),
    "Europe/Berlin": (datetime(2026, 3, 26, tzinfo=UTC), datetime(2026, 10, 22, tzinfo=UTC)),
    "Australia/Sydney": (datetime(2026, 4, 1, tzinfo=UTC), datetime(2026, 10, 1, tzinfo=UTC)),
}
CORPUS: dict[str, dict[str, Any]] = {
    "hourly-cleanup": {"minute": 17},
    "top-of-hour": {"minute": 0},
    "quarter-hourly-sync": {"minute": "*/15"},
    "every-minute-heartbeat": {},
    "twice-hourly": {"minute": "5,35"},
    "nightly-report": {"minute": 0, "hour": 0},
    "early-backup": {"minute": 30, "hour": 2},
    "late-backup": {"minute": 30, "hour": 1},
    "three-am-digest": {"minute": 0, "hour": 3},
    "every-two-hours": {"minute": 5, "hour": "*/2"},
    "weekday-mornings": {"minute": 0, "hour": 9, "day_of_week": "mon-fri"},
    "business-hours": {"minute": "*/30", "hour": "9-17", "day_of_week": "1-5"},
    "sunday-maintenance": {"minute": 45, "hour": 2, "day_of_week": "sunday"},
    "monthly-bills": {"minute": 0, "hour": 6, "day_of_month": 1},
    "first-monday": {"minute": 0, "hour": 8, "day_of_month": "1-7", "day_of_week": "mon"},
}
WEEK = timedelta(days=7)
MAX_LOOP = 300.0  # Celery Beat's default beat_max_loop_interval


def celery_firings(zone: str, start: datetime, fields: dict[str, Any]) -> list[datetime]:
    """The instants Celery Beat runs ``crontab(**fields)`` in ``[start, start + WEEK)``."""
    app = Celery(set_as_current=False, timezone=zone)
    clock = [start]
    tz = ZoneInfo(zone)
    schedule = crontab(app=app, nowfun=lambda: clock[0].astimezone(tz), **fields)
    entry = ScheduleEntry(name="e", task="t", schedule=schedule, app=app, last_run_at=start)
    fired = []
    while clock[0] < start + WEEK:
        due, wait = entry.is_due()
        if due:
            fired.append(clock[0])
            entry = entry._next_instance()
        clock[0] += timedelta(seconds=min(wait, MAX_LOOP))
    return fired


def kernel_firings(zone: str, start: datetime, fields: dict[str, Any]) -> list[datetime]:
    app = Celery(set_as_current=False, timezone=zone)
    raw = {"task": "t", "schedule": crontab(app=app, **fields)}
    spec = validate_job_spec(entry_to_spec("e", raw, timezone=zone))
    planned = firings_between(
        spec.schedule, None, start + timedelta(seconds=1), start + WEEK - timedelta(seconds=1),
        anchor=start, limit=20_000,
    )  # fmt: skip
    return [f.at for f in planned]


def _gap_shifted(at: datetime, zone: str) -> bool:
    """``at`` is the end of a spring-forward gap in ``zone`` (where the kernel's
    ``shift_forward`` puts a removed fixed-hour wall time)."""
    before = (at - timedelta(seconds=1)).astimezone(ZoneInfo(zone)).utcoffset()
    return before is not None and before < (at.astimezone(ZoneInfo(zone)).utcoffset() or before)


@pytest.mark.parametrize("zone", sorted(WEEKS))
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_kernel_fires_where_celery_beat_fires_across_dst(zone: str, name: str) -> None:
    for start in WEEKS[zone]:
        theirs = set(celery_firings(zone, start, CORPUS[name]))
        ours = set(kernel_firings(zone, start, CORPUS[name]))
        only_ours, only_theirs = sorted(ours - theirs), sorted(theirs - ours)
        # The one designed difference: a removed fixed-hour time at the gap's end here,
        # at the same wall time one gap later in Celery (never for a wildcard hour).
        assert all(_gap_shifted(at, zone) for at in only_ours), (only_ours, only_theirs)
        assert len(only_ours) == len(only_theirs), (only_ours, only_theirs)
        if CORPUS[name].get("hour") is None:
            assert only_ours == only_theirs == []


def test_an_hourly_crontab_skips_the_missing_hour_as_celery_does() -> None:
    """crontab(minute=17) on 8 March 2026 in Los Angeles: 01:17 PST, then 03:17 PDT."""
    start = datetime(2026, 3, 8, 9, tzinfo=UTC)  # 01:00 PST
    app = Celery(set_as_current=False, timezone="America/Los_Angeles")
    raw = {"task": "t", "schedule": crontab(app=app, minute=17)}
    spec = validate_job_spec(entry_to_spec("e", raw, timezone="America/Los_Angeles"))
    planned = firings_between(
        spec.schedule, None, start, start + timedelta(hours=3), anchor=start, limit=10
    )
    assert [f.at for f in planned] == [
        datetime(2026, 3, 8, 9, 17, tzinfo=UTC),  # 01:17 PST
        datetime(2026, 3, 8, 10, 17, tzinfo=UTC),  # 03:17 PDT; no 03:00
        datetime(2026, 3, 8, 11, 17, tzinfo=UTC),
    ]
