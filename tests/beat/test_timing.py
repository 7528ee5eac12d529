"""Schedule kinds, trigger keys, preview and the catch-up plan (beat_schedule.timing)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from beat_schedule.timing import (
    Firing,
    firings_between,
    next_firing,
    plan_due,
    preview,
    trigger_key,
)
from kernel.errors import InvalidArgument

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
ANCHOR = datetime(2026, 1, 1, tzinfo=UTC)
MINUTELY = [{"cron": "* * * * *", "timezone": "UTC"}, {"every": 60.0}]


def _at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def _cursor(schedule: dict[str, Any], at: datetime) -> Firing:
    """The cursor Beat holds after planning every firing before ``at``."""
    firing = next_firing(schedule, None, at - timedelta(microseconds=1), anchor=ANCHOR)
    assert firing is not None and firing.at == at
    return firing


# --- trigger keys -------------------------------------------------------------------


def test_trigger_key_is_utc_to_the_second() -> None:
    berlin = datetime(2026, 11, 29, 13, 0, tzinfo=ZoneInfo("Europe/Berlin"))
    assert trigger_key("cron", berlin) == "cron:2026-11-29T12:00:00Z"
    assert trigger_key("at", T0.replace(microsecond=250)) == "at:2026-11-29T12:00:00.000250Z"


@pytest.mark.parametrize(
    ("kind", "at", "field"),
    [("manual", T0, "kind"), ("cron", datetime(2026, 11, 29, 12), "at")],
)
def test_trigger_key_refuses_unknown_kind_and_naive_time(
    kind: str, at: datetime, field: str
) -> None:
    with pytest.raises(InvalidArgument) as err:
        trigger_key(kind, at)
    assert err.value.field == field


# --- every / at / in ----------------------------------------------------------------


def test_every_fires_on_multiples_of_the_interval_since_the_epoch() -> None:
    schedule = {"every": 7.0}
    after = datetime(2026, 11, 29, 12, 0, 3, 500, tzinfo=UTC)
    firings = firings_between(
        schedule, None, after, after + timedelta(seconds=20), anchor=T0, limit=9
    )
    assert [f.at.timestamp() % 7 for f in firings] == [0, 0, 0]
    assert firings[0].at > after and firings[0].at - after <= timedelta(seconds=7)
    # A Beat starting elsewhere in the interval agrees on instants and keys.
    for earlier in (0.1, 3.3, 6.9):
        asked = firings[0].at - timedelta(seconds=earlier)
        assert next_firing(schedule, None, asked, anchor=ANCHOR) == firings[0]
    assert firings[0].trigger_key.startswith("every:")


def test_every_keeps_sub_second_intervals_exact() -> None:
    firings = firings_between(
        {"every": 0.25}, None, T0, T0 + timedelta(seconds=1), anchor=T0, limit=10
    )
    assert [f.trigger_key for f in firings] == [
        "every:2026-11-29T12:00:00Z",
        "every:2026-11-29T12:00:00.250000Z",
        "every:2026-11-29T12:00:00.500000Z",
        "every:2026-11-29T12:00:00.750000Z",
        "every:2026-11-29T12:00:01Z",
    ]


def test_at_fires_once() -> None:
    schedule = {"at": "2026-11-29T13:00:00+01:00"}
    first = next_firing(schedule, None, T0 - timedelta(days=1), anchor=ANCHOR)
    assert first == Firing("at:2026-11-29T12:00:00Z", T0)
    assert next_firing(schedule, None, T0, anchor=ANCHOR) is None
    assert firings_between(schedule, None, T0, T0, anchor=ANCHOR, limit=5) == [first]


def test_in_fires_once_relative_to_the_definition_time() -> None:
    firing = next_firing({"in": 900.0}, None, ANCHOR, anchor=ANCHOR)
    assert firing == Firing("at:2026-01-01T00:15:00Z", ANCHOR + timedelta(minutes=15))


def test_no_schedule_never_fires() -> None:
    assert next_firing(None, None, T0, anchor=ANCHOR) is None
    assert firings_between(None, None, T0, _at(60), anchor=ANCHOR, limit=5) == []
    assert preview(None, None, T0, 3, anchor=ANCHOR) == []
    plan = plan_due(None, None, "all", None, cursor=None, now=T0, anchor=ANCHOR)
    assert (plan.fire, plan.missed, plan.next_cursor) == ([], [], None)


def test_cron_that_never_matches_is_exhausted() -> None:
    assert next_firing({"cron": "0 0 30 2 *"}, None, T0, anchor=ANCHOR) is None


def test_firings_between_includes_both_ends_and_honours_limit() -> None:
    schedule = MINUTELY[0]
    firings = firings_between(schedule, None, T0, _at(3), anchor=ANCHOR, limit=10)
    assert [f.at for f in firings] == [_at(m) for m in range(4)]
    assert len(firings_between(schedule, None, T0, _at(3), anchor=ANCHOR, limit=2)) == 2


# --- preview ------------------------------------------------------------------------


def test_preview_shows_local_wall_times_with_the_policy_applied() -> None:
    schedule = {"cron": "30 2 * * *", "timezone": "Europe/Berlin"}
    spring = datetime(2026, 3, 28, 12, tzinfo=UTC)  # the gap is on 29 March
    shifted = preview(schedule, {"gap": "shift_forward", "fold": "first"}, spring, 2, anchor=ANCHOR)
    assert [local.strftime("%d %H:%M %z") for _, local in shifted] == [
        "29 03:00 +0200",
        "30 02:30 +0200",
    ]
    assert shifted[0][0].at == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    skipped = preview(schedule, {"gap": "skip", "fold": "first"}, spring, 1, anchor=ANCHOR)
    assert skipped[0][1].day == 30

    autumn = datetime(2026, 10, 24, 12, tzinfo=UTC)  # 02:00-02:59 repeats on 25 October
    expected = {"first": ["+0200"], "last": ["+0100"], "both": ["+0200", "+0100"]}
    for fold, offsets in expected.items():
        walls = preview(schedule, {"gap": "skip", "fold": fold}, autumn, 3, anchor=ANCHOR)
        on_the_day = [local for _, local in walls if local.day == 25]
        assert [local.strftime("%H:%M") for local in on_the_day] == ["02:30"] * len(offsets)
        assert [local.strftime("%z") for local in on_the_day] == offsets


def test_preview_of_interval_is_in_utc() -> None:
    ((firing, local),) = preview({"every": 3600.0}, None, T0, 1, anchor=ANCHOR)
    assert firing.at == local == _at(60)


# --- plan_due: catch-up -------------------------------------------------------------


@pytest.mark.parametrize("schedule", MINUTELY)
@pytest.mark.parametrize(
    ("policy", "fired", "missed", "reason"),
    [
        ("none", [], [1, 2, 3, 4, 5, 6, 7], "catchup_none"),
        ("latest", [7], [1, 2, 3, 4, 5, 6], "catchup_latest"),
        ("all", [1, 2, 3, 4, 5, 6, 7], [], "outside_catchup_window"),
    ],
)
def test_seven_minutes_down(
    schedule: dict[str, Any], policy: str, fired: list[int], missed: list[int], reason: str
) -> None:
    # Beat planned up to 12:00 and died; it is back at 12:07:30, between firings.
    plan = plan_due(
        schedule, None, policy, 600.0, cursor=_cursor(schedule, _at(1)), now=_at(7.5), anchor=ANCHOR
    )
    assert [f.at for f in plan.fire] == [_at(m) for m in fired]
    assert [f.at for f in plan.missed] == [_at(m) for m in missed]
    assert plan.missed_count == len(missed)
    assert plan.missed_reason == reason
    assert plan.next_cursor is not None and plan.next_cursor.at == _at(8)


@pytest.mark.parametrize("policy", ["none", "latest", "all"])
def test_on_time_firings_fire_under_every_policy(policy: str) -> None:
    schedule = MINUTELY[0]
    plan = plan_due(
        schedule, None, policy, 0.0, cursor=_cursor(schedule, _at(7)), now=_at(7.2), anchor=ANCHOR
    )
    assert [f.at for f in plan.fire] == [_at(7)]
    assert plan.missed == [] and plan.missed_count == 0


def test_catch_up_all_is_bounded_by_the_window() -> None:
    schedule = MINUTELY[1]
    plan = plan_due(
        schedule, None, "all", 180.0, cursor=_cursor(schedule, _at(1)), now=_at(7.5), anchor=ANCHOR
    )
    assert [f.at for f in plan.fire] == [_at(5), _at(6), _at(7)]
    assert [f.at for f in plan.missed] == [_at(1), _at(2), _at(3), _at(4)]
    assert plan.missed_reason == "outside_catchup_window"


def test_nothing_due_keeps_the_cursor() -> None:
    schedule = MINUTELY[0]
    cursor = _cursor(schedule, _at(8))
    plan = plan_due(schedule, None, "latest", None, cursor=cursor, now=_at(7.5), anchor=ANCHOR)
    assert plan.fire == [] and plan.missed == [] and plan.next_cursor == cursor


def test_max_fire_truncates_and_the_next_call_continues() -> None:
    schedule = MINUTELY[0]
    now = _at(100.5)
    cursor: Firing | None = _cursor(schedule, _at(1))
    batches: list[list[Firing]] = []
    while cursor is not None and cursor.at <= now:
        plan = plan_due(
            schedule, None, "all", None, cursor=cursor, now=now, anchor=ANCHOR, max_fire=30
        )
        assert plan.missed_count == 0
        batches.append(plan.fire)
        cursor = plan.next_cursor
    assert [len(b) for b in batches] == [30, 30, 30, 10]
    assert [f.at for b in batches for f in b] == [_at(m) for m in range(1, 101)]
    assert cursor is not None and cursor.at == _at(101)


def test_missed_records_are_capped_but_counted_exactly() -> None:
    schedule = MINUTELY[0]
    now = _at(30 * 24 * 60 + 0.5)  # down for 30 days
    plan = plan_due(
        schedule,
        None,
        "latest",
        None,
        cursor=_cursor(schedule, _at(1)),
        now=now,
        anchor=ANCHOR,
        max_records=50,
    )
    assert [f.at for f in plan.fire] == [_at(30 * 24 * 60)]
    assert [f.at for f in plan.missed] == [_at(m) for m in range(1, 51)]
    assert plan.missed_count == 30 * 24 * 60 - 1


# ~158 million firings of an every-second job over five years of downtime: planning
# must jump or stop early, never walk them.
SECONDLY = {"every": 1.0}
FIVE_YEARS_AGO = datetime(2021, 11, 29, 12, 0, tzinfo=UTC)
DUE = int((T0 - FIVE_YEARS_AGO).total_seconds()) + 1


@pytest.mark.parametrize(("policy", "fired"), [("none", 16), ("latest", 1)])
def test_years_of_every_second_jump_to_now(policy: str, fired: int) -> None:
    cursor = _cursor(SECONDLY, FIVE_YEARS_AGO)
    plan = plan_due(SECONDLY, None, policy, None, cursor=cursor, now=T0, anchor=ANCHOR)
    # none: the last 15 s and now itself are on time; latest: only the most recent runs.
    assert [f.at for f in plan.fire] == [T0 - timedelta(seconds=s) for s in range(fired)][::-1]
    assert plan.missed_count == DUE - fired
    assert [f.at for f in plan.missed] == [
        FIVE_YEARS_AGO + timedelta(seconds=s) for s in range(1000)
    ]
    assert plan.next_cursor is not None and plan.next_cursor.at == T0 + timedelta(seconds=1)


def test_years_of_every_second_under_all_fire_in_batches() -> None:
    cursor = _cursor(SECONDLY, FIVE_YEARS_AGO)
    plan = plan_due(SECONDLY, None, "all", None, cursor=cursor, now=T0, anchor=ANCHOR)
    assert [f.at for f in plan.fire] == [FIVE_YEARS_AGO + timedelta(seconds=s) for s in range(1000)]
    assert plan.missed_count == 0
    assert plan.next_cursor is not None
    assert plan.next_cursor.at == FIVE_YEARS_AGO + timedelta(seconds=1000)


def test_new_job_fires_at_its_first_future_firing() -> None:
    schedule = MINUTELY[0]
    defined = _at(0.5)
    plan = plan_due(schedule, None, "none", None, cursor=None, now=defined, anchor=defined)
    assert plan.fire == [] and plan.missed_count == 0
    assert plan.next_cursor is not None and plan.next_cursor.at == _at(1)
    plan = plan_due(
        schedule, None, "none", None, cursor=plan.next_cursor, now=_at(1.01), anchor=defined
    )
    assert [f.at for f in plan.fire] == [_at(1)]


def test_new_job_is_owed_nothing_from_before_it_existed() -> None:
    schedule = MINUTELY[0]
    plan = plan_due(schedule, None, "all", None, cursor=None, now=_at(10.5), anchor=_at(7.5))
    assert [f.at for f in plan.fire] == [_at(8), _at(9), _at(10)]
    assert plan.missed_count == 0


@pytest.mark.parametrize(
    ("policy", "window", "fires"),
    [("none", None, False), ("latest", None, True), ("all", 3600.0, True), ("all", 60.0, False)],
)
def test_one_shot_in_the_past_follows_the_policy(
    policy: str, window: float | None, fires: bool
) -> None:
    schedule = {"at": "2026-11-29T12:00:00Z"}
    plan = plan_due(schedule, None, policy, window, cursor=None, now=_at(5), anchor=_at(4))
    assert [f.at for f in plan.fire] == ([T0] if fires else [])
    assert [f.at for f in plan.missed] == ([] if fires else [T0])
    assert plan.missed_count == (0 if fires else 1)
    assert plan.next_cursor is None


def test_one_shot_within_grace_fires_even_under_none() -> None:
    plan = plan_due({"in": 60.0}, None, "none", None, cursor=None, now=_at(1.2), anchor=T0)
    assert [f.trigger_key for f in plan.fire] == ["at:2026-11-29T12:01:00Z"]
    assert plan.next_cursor is None


def test_latest_uses_the_most_recent_firing_of_a_sparse_cron() -> None:
    # A weekly job down for a year: the fired one is last Sunday's, found without a walk.
    schedule = {"cron": "0 9 * * 0", "timezone": "America/New_York"}
    cursor = next_firing(schedule, None, T0 - timedelta(days=365), anchor=ANCHOR)
    plan = plan_due(schedule, None, "latest", None, cursor=cursor, now=T0, anchor=ANCHOR)
    (fired,) = plan.fire
    assert fired.at.astimezone(ZoneInfo("America/New_York")).strftime("%a %H:%M") == "Sun 09:00"
    assert T0 - fired.at < timedelta(days=7)
    assert plan.missed_count == len(plan.missed) == 51


# --- refusals -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schedule", "dst", "field"),
    [
        ({"cron": "61 * * * *"}, None, "schedule.cron"),
        ({"cron": "0 * * * *", "timezone": "Mars/Olympus"}, None, "schedule.timezone"),
        ({"cron": "0 * * * *"}, {"gap": "later"}, "dst.gap"),
        ({"cron": "0 * * * *"}, {"fold": "middle"}, "dst.fold"),
        ({"every": 0}, None, "schedule.every"),
        ({"at": "tomorrow"}, None, "schedule.at"),
        ({"at": "2026-11-29T12:00:00"}, None, "schedule.at"),
        ({"weekly": True}, None, "schedule"),
    ],
)
def test_bad_schedules_are_refused_with_the_field(
    schedule: dict[str, Any], dst: dict[str, str] | None, field: str
) -> None:
    with pytest.raises(InvalidArgument) as err:
        next_firing(schedule, dst, T0, anchor=ANCHOR)
    assert err.value.field == field


def test_plan_refuses_unknown_policy_and_naive_now() -> None:
    with pytest.raises(InvalidArgument) as err:
        plan_due(MINUTELY[0], None, "some", None, cursor=None, now=T0, anchor=ANCHOR)
    assert err.value.field == "catchup.policy"
    with pytest.raises(InvalidArgument) as err:
        plan_due(
            MINUTELY[0], None, "all", None, cursor=None, now=T0.replace(tzinfo=None), anchor=ANCHOR
        )
    assert err.value.field == "now"


def test_inputs_in_other_zones_give_utc_outputs() -> None:
    plus_two = timezone(timedelta(hours=2))
    firing = next_firing(MINUTELY[0], None, T0.astimezone(plus_two), anchor=ANCHOR)
    assert firing is not None and firing.at == _at(1) and firing.at.tzinfo is UTC
