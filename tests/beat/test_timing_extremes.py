"""The planner at the edges of what a job file may say: every schedule field at its
extreme values, planned, previewed and walked at the edges of time, never raises
(issue 41: one job's ``at: 0001-01-01`` stopped every job's firing)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from beat_schedule.timing import firings_between, next_firing, plan_due, preview
from kernel import InvalidArgument
from kernel.spec.durations import EARLIEST_INSTANT, LATEST_INSTANT, MAX_DURATION_S
from kernel.spec.jobspec import validate_job_spec

LONGEST = MAX_DURATION_S
SPARSE = "0 0 29 2 mon"  # with day_match all: 29 February on a Monday, 5-40 years apart
EXTREMES: list[dict[str, Any]] = [
    {"at": "1970-01-01T00:00:00Z"},
    {"at": "9000-01-01T00:00:00Z"},
    {"at": "9000-01-01T13:59:59.999999+14:00"},
    {"in": LONGEST},
    {"in": "0.000001s"},
    {"every": 1},
    {"every": LONGEST},
    {"every": "1.000000001s"},
    {"cron": "* * * * *"},
    {"cron": SPARSE, "day_match": "all"},
    {"cron": SPARSE, "day_match": "all", "timezone": "Pacific/Kiritimati"},
    {"cron": "0 0 29 2 *", "timezone": "Etc/GMT+12"},
    {"cron": "30 2 * * *", "timezone": "America/Adak"},
    {"cron": "59 23 31 12 *", "timezone": "Pacific/Kiritimati", "jitter": 86399},
    {"every": 60, "start": "9000-01-01T00:00:00Z"},
    {"every": 60, "start": "1970-01-01T00:00:00Z", "end": "9000-01-01T00:00:00Z"},
    {"every": 60, "end": "1970-01-01T00:01:00Z", "max_runs": 1_000_000},
    {"every": LONGEST, "jitter": LONGEST - 1, "max_runs": 1},
    {"cron": SPARSE, "day_match": "all", "start": "8990-01-01T00:00:00Z", "jitter": 3600},
]
EDGES = [EARLIEST_INSTANT, datetime(2026, 3, 2, 12, tzinfo=UTC), LATEST_INSTANT]
BEYOND = [datetime(1, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, 23, 59, tzinfo=UTC)]


def _spec(schedule: dict[str, Any], policy: str) -> dict[str, Any]:
    window = {"window": "3650d"} if policy == "all" else {}
    return validate_job_spec(
        {
            "id": "edge",
            "kind": "callable",
            "payload": {"callable": "os.path:join"},
            "schedule": schedule,
            "catchup": {"policy": policy, **window},
        }
    ).to_dict()


@pytest.mark.parametrize("schedule", EXTREMES, ids=lambda s: str(sorted(s.items())))
@pytest.mark.parametrize("policy", ["latest", "all", "none"])
def test_the_planner_takes_every_extreme_a_job_may_hold(
    schedule: dict[str, Any], policy: str
) -> None:
    spec = _spec(schedule, policy)
    sched, dst, catchup = spec["schedule"], spec["dst"], spec["catchup"]
    for anchor in EDGES:
        # A job is planned from its definition: now is at or soon after its anchor (a
        # Beat down for millennia is not an extreme a job holds, and costs its walk).
        for now in [anchor, anchor + timedelta(days=2)]:
            plan = plan_due(
                sched, dst, catchup["policy"], catchup["window"],
                cursor=None, now=now, anchor=anchor, max_fire=50, max_records=50, job_id="edge",
            )  # fmt: skip
            assert all(EARLIEST_INSTANT <= f.at <= LATEST_INSTANT + timedelta(days=3650)
                       for f in plan.fire)  # fmt: skip
            if plan.next_cursor is not None:
                plan_due(
                    sched, dst, catchup["policy"], catchup["window"], cursor=plan.next_cursor,
                    now=now, anchor=anchor, max_fire=50, max_records=50, job_id="edge",
                )  # fmt: skip
        for after in [*EDGES, *BEYOND]:
            assert len(preview(sched, dst, after, 300, anchor=anchor, job_id="edge")) <= 300
            next_firing(sched, dst, after, anchor=anchor, job_id="edge")
        found = firings_between(
            sched, dst, BEYOND[0], BEYOND[1], anchor=anchor, limit=300, job_id="edge"
        )
        assert [f.at for f in found] == sorted(f.at for f in found)


@pytest.mark.parametrize(
    "schedule",
    [
        {"at": "0001-01-01T00:00:00Z"},
        {"at": "1969-12-31T23:59:59Z"},
        {"at": "9000-01-01T00:00:00.000001Z"},
        {"at": "9999-12-31T23:59:59Z"},
        {"at": "9999-12-31T23:59:59-14:00"},  # past year 9999 in UTC
        {"every": 60, "start": "0001-01-01T00:00:00Z"},
        {"every": 60, "end": "9999-01-01T00:00:00Z"},
    ],
)
def test_instants_outside_the_planners_years_are_refused_at_apply(
    schedule: dict[str, Any],
) -> None:
    with pytest.raises(InvalidArgument) as refused:
        _spec(schedule, "latest")
    assert refused.value.field.startswith("schedule.")
    assert "1970-01-01T00:00:00Z to 9000-01-01T00:00:00Z" in refused.value.message
