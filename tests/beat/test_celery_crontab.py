"""A ``beat_schedule`` crontab fires where Celery's own ``crontab`` would.

For generated crontabs, in Celery's own field syntax (names, steps, ranges, lists),
several zones and start instants, the kernel's next firings (through the job spec
the sync writes, validated by the kernel) are the wall times Celery reaches by
walking ``remaining_delta`` from the same start. The walk stops at a wall time that
a DST change repeats or skips: there the kernel follows the job's explicit DST
policy, which Celery leaves to datetime arithmetic.
"""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from celery import Celery
from celery.schedules import crontab
from hypothesis import assume, given, reject, settings
from hypothesis import strategies as st

from beat_schedule.sync import entry_to_spec
from beat_schedule.timing import preview
from kernel.spec.jobspec import validate_job_spec

ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe")
FIRINGS = 6
_DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_LONG_NAMES = ("sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday")


def _field(low: int, high: int, names: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    """One crontab field as Celery accepts it; ``names`` spell the values ``low..high``."""
    value = st.integers(low, high)
    word = value.map(str)
    if names:
        word = st.one_of(word, value.map(lambda v: names[v - low]))
    pair = st.tuples(value, value).map(sorted)
    return st.one_of(
        st.just("*"),
        word,
        st.integers(2, 15).map(lambda k: f"*/{k}"),
        pair.map(lambda ab: f"{ab[0]}-{ab[1]}"),
        st.tuples(pair, st.integers(1, 6)).map(lambda t: f"{t[0][0]}-{t[0][1]}/{t[1]}"),
        st.lists(word, min_size=2, max_size=4, unique=True).map(",".join),
    )


_DOW = st.one_of(_field(0, 6, _DAY_NAMES), _field(0, 6, _LONG_NAMES))


_NAMES = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
CRONTAB_FIELDS = st.fixed_dictionaries(
    dict(
        zip(_NAMES, (_field(0, 59), _field(0, 23), _field(1, 31), _field(1, 12), _DOW), strict=True)
    )
)
STARTS = st.datetimes(datetime(2001, 1, 1), datetime(2036, 12, 31))


def _ambiguous(wall: datetime, zone: ZoneInfo) -> bool:
    """The wall time occurs twice or not at all in ``zone``."""
    offsets = {wall.replace(tzinfo=zone, fold=fold).utcoffset() for fold in (0, 1)}
    return len(offsets) > 1


def _celery_walk(entry: crontab, zone: ZoneInfo, start: datetime, n: int) -> list[datetime]:
    """Celery Beat's successive next-run wall times after ``start`` (naive, in ``zone``)."""
    walls: list[datetime] = []
    last = start
    while len(walls) < n:
        last_run_at, delta, _now = entry.remaining_delta(last, tz=zone)
        last = last_run_at + delta
        walls.append(last.replace(tzinfo=None))
    return walls


@settings(max_examples=300, deadline=None)
@given(fields=CRONTAB_FIELDS, zone_name=st.sampled_from(ZONES), local_start=STARTS)
def test_beat_schedule_crontab_fires_where_celery_would(
    fields: dict[str, str], zone_name: str, local_start: datetime
) -> None:
    # Bound to an app in the zone, as Beat's crontabs are: Celery reads some of a
    # crontab's arithmetic in its app's zone whatever zone it is asked about.
    app = Celery(set_as_current=False, timezone=zone_name)
    try:
        entry = crontab(app=app, **fields)
    except ValueError:  # Celery refuses dates that never occur, like 30 February
        reject()
    zone = ZoneInfo(zone_name)
    start = local_start.replace(second=0, microsecond=0, tzinfo=zone)
    assume(not _ambiguous(start.replace(tzinfo=None), zone))
    entry.nowfun = lambda: start  # Celery asks for "now" only to report it
    assert entry.tz == zone
    spec = validate_job_spec(
        entry_to_spec("e", {"task": "t", "schedule": entry}, timezone=zone_name)
    )
    ours = [
        local.replace(tzinfo=None)
        for _, local in preview(spec.schedule, None, start, FIRINGS, anchor=start)
    ]
    theirs = _celery_walk(entry, zone, start, FIRINGS)
    for index, wall in enumerate(theirs):
        if _ambiguous(wall, zone):  # the DST policy decides from here on
            ours, theirs = ours[:index], theirs[:index]
            break
    assert ours == theirs


def test_day_of_month_and_day_of_week_must_both_match() -> None:
    """The issue's example: the first Monday of each month, not every day 1-7 plus Mondays."""
    entry = crontab(minute=0, hour=9, day_of_month="1-7", day_of_week="mon")
    spec = validate_job_spec(entry_to_spec("e", {"task": "t", "schedule": entry}))
    start = datetime(2026, 1, 1, tzinfo=UTC)
    firings = [f.at for f, _ in preview(spec.schedule, None, start, 3, anchor=start)]
    assert firings == [
        datetime(2026, 1, 5, 9, tzinfo=UTC),
        datetime(2026, 2, 2, 9, tzinfo=UTC),
        datetime(2026, 3, 2, 9, tzinfo=UTC),
    ]


def test_job_file_cron_keeps_standard_either_day_semantics() -> None:
    spec = validate_job_spec(
        {"id": "j", "kind": "task", "payload": {"task": "t"}, "schedule": {"cron": "0 9 1-7 * 1"}}
    )
    start = datetime(2026, 1, 1, tzinfo=UTC)
    days = [f.at.day for f, _ in preview(spec.schedule, None, start, 9, anchor=start)]
    assert days == [1, 2, 3, 4, 5, 6, 7, 12, 19]
    assert spec.schedule == {"cron": "0 9 1-7 * 1", "timezone": "UTC"}
