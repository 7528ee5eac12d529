"""Property tests: random cron expressions in random IANA zones, windows placed on
the zone's offset changes, every DST policy.

Whatever the input, firings come out strictly increasing with one trigger key each,
each one is a wall time the expression names (or the end of a gap it was shifted
to), the policies relate as sets the way their definitions say, and the plan's
day-at-a-time missed count agrees with walking the firings.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, available_timezones

from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from beat_schedule.timing import Firing, firings_between, next_firing, plan_due

ANCHOR = datetime(2000, 1, 1, tzinfo=UTC)
LIMIT = 300
WINDOW = timedelta(days=3)
ALL_ZONES = sorted(available_timezones())


def _field(low: int, high: int) -> st.SearchStrategy[str]:
    value = st.integers(low, high)
    pair = st.tuples(value, value).map(sorted)
    return st.one_of(
        st.just("*"),
        value.map(str),
        st.integers(2, 15).map(lambda k: f"*/{k}"),
        pair.map(lambda ab: f"{ab[0]}-{ab[1]}"),
        st.tuples(pair, st.integers(1, 6)).map(lambda t: f"{t[0][0]}-{t[0][1]}/{t[1]}"),
        st.lists(value, min_size=2, max_size=4, unique=True).map(
            lambda xs: ",".join(map(str, sorted(xs)))
        ),
    )


CRONS = st.tuples(_field(0, 59), _field(0, 23), _field(1, 31), _field(1, 12), _field(0, 6)).map(
    " ".join
)


def _offset_changes(zone: ZoneInfo, year: int) -> list[datetime]:
    """Instants (to the day) where ``zone``'s UTC offset changes during ``year``."""
    start = datetime(year, 1, 1, tzinfo=UTC)
    days = [start + timedelta(days=d) for d in range(367)]
    offsets = [d.astimezone(zone).utcoffset() for d in days]
    return [days[i] for i in range(1, len(days)) if offsets[i] != offsets[i - 1]]


@st.composite
def windows(draw: st.DrawFn) -> tuple[str, datetime]:
    """A zone and a window start, usually the day before one of its offset changes."""
    zone = draw(st.sampled_from(ALL_ZONES))
    year = draw(st.integers(1995, 2037))
    changes = _offset_changes(ZoneInfo(zone), year)
    if changes and draw(st.integers(0, 3)):  # three times in four, when there are any
        return zone, draw(st.sampled_from(changes)) - timedelta(days=2)
    moment = draw(st.integers(0, 365 * 24 * 3600))
    return zone, datetime(year, 1, 1, tzinfo=UTC) + timedelta(seconds=moment)


def _between(cron: str, zone: str, gap: str, fold: str, start: datetime) -> list[Firing]:
    return firings_between(
        {"cron": cron, "timezone": zone},
        {"gap": gap, "fold": fold},
        start,
        start + WINDOW,
        anchor=ANCHOR,
        limit=LIMIT,
    )


def _until(firings: list[Firing], end: datetime) -> set[datetime]:
    return {f.at for f in firings if f.at <= end}


@settings(max_examples=60, deadline=None, database=None)
@given(
    cron=CRONS,
    window=windows(),
    gap=st.sampled_from(["shift_forward", "skip"]),
    fold=st.sampled_from(["first", "last", "both"]),
)
def test_firings_are_ordered_unique_and_named_by_the_expression(
    cron: str, window: tuple[str, datetime], gap: str, fold: str
) -> None:
    zone, start = window
    tz = ZoneInfo(zone)
    firings = _between(cron, zone, gap, fold, start)

    assert all(a.at < b.at for a, b in zip(firings, firings[1:], strict=False))
    assert len({f.trigger_key for f in firings}) == len(firings)
    assert all(start <= f.at <= start + WINDOW for f in firings)

    for firing in firings:
        wall = firing.at.astimezone(tz)
        shifted = (firing.at - timedelta(seconds=1)).astimezone(tz).utcoffset() != wall.utcoffset()
        named = croniter.match(cron, wall.replace(tzinfo=None))
        assert named or (shifted and gap == "shift_forward"), (firing, wall)

    schedule = {"cron": cron, "timezone": zone}
    dst = {"gap": gap, "fold": fold}
    for earlier, later in zip(firings[:40], firings[1:41], strict=False):
        assert next_firing(schedule, dst, earlier.at, anchor=ANCHOR) == later

    if len(firings) >= 2:
        last = firings[-1]
        plan = plan_due(
            schedule,
            dst,
            "none",
            None,
            cursor=firings[0],
            now=last.at,
            anchor=ANCHOR,
            grace_s=0.0,
            max_records=5,
        )
        assert plan.fire == [last]
        assert plan.missed_count == len(firings) - 1
        assert plan.missed == firings[: min(5, len(firings) - 1)]


@settings(max_examples=40, deadline=None, database=None)
@given(cron=CRONS, window=windows())
def test_policies_relate_as_their_definitions_say(cron: str, window: tuple[str, datetime]) -> None:
    zone, start = window
    runs = {
        (gap, fold): _between(cron, zone, gap, fold, start)
        for gap in ("shift_forward", "skip")
        for fold in ("first", "last", "both")
    }
    # Compare only up to where no run was cut short by the limit.
    end = min([start + WINDOW] + [run[-1].at for run in runs.values() if len(run) == LIMIT])
    for gap in ("shift_forward", "skip"):
        first, last, both = (_until(runs[gap, fold], end) for fold in ("first", "last", "both"))
        assert both == first | last
    for fold in ("first", "last", "both"):
        assert _until(runs["skip", fold], end) <= _until(runs["shift_forward", fold], end)
