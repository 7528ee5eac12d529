"""``beat_schedule`` entries become kernel job definitions: what each Celery schedule means,
what the ``kernel`` key overrides, what is refused, and when a revision is made."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from celery import Celery
from celery.schedules import BaseSchedule, crontab, schedule

from beat_schedule.sync import apply_specs, beat_schedule_specs, entry_to_spec
from kernel import InvalidArgument
from kernel.testing import memory_kernel

if TYPE_CHECKING:
    from tests.beat.conftest import Beat


class _OwnRules(schedule):
    """A ``schedule`` subclass: it may decide ``is_due`` its own way, which the kernel
    cannot follow, so it is refused rather than read as a plain interval."""


def _schedule_of(value: Any, **kwargs: Any) -> dict[str, Any]:
    spec = entry_to_spec("e", {"task": "t", "schedule": value}, **kwargs)
    result: dict[str, Any] = spec["schedule"]
    return result


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (crontab(minute="*/15", hour="2-4"), {"cron": "*/15 2-4 * * *", "timezone": "UTC"}),
        (crontab(minute=0, hour=(12, 0), day_of_week="mon-fri"),
         {"cron": "0 0,12 * * 1-5", "timezone": "UTC"}),
        (crontab(minute=0, hour=9, day_of_month="1-7", day_of_week="mon"),
         {"cron": "0 9 1-7 * 1", "timezone": "UTC", "day_match": "all"}),
        (crontab(minute=0, hour=4, day_of_week="monday,friday"),
         {"cron": "0 4 * * 1,5", "timezone": "UTC"}),
        (crontab(minute=30, hour=1, day_of_month=1, month_of_year="*/3"),
         {"cron": "30 1 1 */3 *", "timezone": "UTC"}),
        (timedelta(minutes=5), {"every": 300.0}),
        (schedule(run_every=timedelta(seconds=90)), {"every": 90.0}),
        (30, {"every": 30.0}),
        (2.5, {"every": 2.5}),
    ],
)  # fmt: skip
def test_celery_schedules_map_to_kernel_schedules(value: Any, expected: dict[str, Any]) -> None:
    assert _schedule_of(value) == expected


def test_a_crontab_reads_the_zone_of_its_app_or_of_the_synced_configuration() -> None:
    assert _schedule_of(crontab(hour=3, minute=0), timezone="Europe/Berlin")["timezone"] == (
        "Europe/Berlin"
    )
    app = Celery("zoned", set_as_current=False)
    app.conf.timezone = "America/New_York"
    bound = crontab(hour=3, minute=0, app=app)
    assert _schedule_of(bound, timezone="Europe/Berlin")["timezone"] == "America/New_York"
    conf = {
        "timezone": "Asia/Kolkata",
        "beat_schedule": {"daily": {"task": "t", "schedule": crontab(minute=0, hour=9)}},
    }
    [spec] = beat_schedule_specs(conf)
    assert spec["schedule"] == {"cron": "0 9 * * *", "timezone": "Asia/Kolkata"}


def test_an_entry_becomes_a_task_job_and_the_kernel_key_sets_the_rest() -> None:
    spec = entry_to_spec(
        "reports nightly/eu",
        {
            "task": "reports.build",
            "schedule": 60,
            "args": (1, "eu"),
            "kwargs": {"full": True},
            "options": {"queue": "reports"},
            "kernel": {
                "overlap": "queue",
                "max_queued": 3,
                "catchup": {"policy": "all", "window": "1h"},
            },
        },
    )
    assert spec == {
        "id": "reports-nightly-eu",
        "kind": "task",
        "payload": {"task": "reports.build", "args": [1, "eu"], "kwargs": {"full": True}},
        "schedule": {"every": 60.0},
        "queue": "reports",
        "overlap": "queue",
        "max_queued": 3,
        "catchup": {"policy": "all", "window": "1h"},
    }
    overridden = entry_to_spec(
        "x", {"task": "t", "schedule": 5, "kernel": {"schedule": {"cron": "0 * * * *"}}}
    )
    assert overridden["schedule"] == {"cron": "0 * * * *"}


@pytest.mark.parametrize(
    ("name", "entry", "field"),
    [
        ("base", {"task": "t", "schedule": BaseSchedule()}, "beat_schedule['base'].schedule"),
        ("own", {"task": "t", "schedule": _OwnRules(60)}, "beat_schedule['own'].schedule"),
        ("text", {"task": "t", "schedule": "every minute"}, "beat_schedule['text'].schedule"),
        ("flag", {"task": "t", "schedule": True}, "beat_schedule['flag'].schedule"),
        ("bare", {"schedule": 5}, "beat_schedule['bare']"),
        ("//", {"task": "t", "schedule": 5}, "beat_schedule['//']"),
    ],
)  # fmt: skip
def test_unsupported_entries_are_refused_naming_the_field(
    name: str, entry: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidArgument) as refused:
        entry_to_spec(name, entry)
    assert refused.value.field == field and refused.value.code == "INVALID_ARGUMENT"


def test_reapplying_keeps_the_revision_and_a_changed_entry_bumps_it() -> None:
    kernel = memory_kernel()
    entries = {"tick": {"task": "t", "schedule": timedelta(minutes=1)}}
    specs = beat_schedule_specs({"beat_schedule": entries})
    assert apply_specs(kernel, specs, source="beat_schedule") == {"tick": "created"}
    # The same meaning spelled another way (60 seconds as a number) is no change.
    same = beat_schedule_specs({"beat_schedule": {"tick": {"task": "t", "schedule": 60}}})
    assert apply_specs(kernel, same, source="beat_schedule") == {"tick": "unchanged"}
    assert kernel.get_job("tick").revision == 1

    changed = beat_schedule_specs({"beat_schedule": {"tick": {"task": "t", "schedule": 120}}})
    assert apply_specs(kernel, changed, source="beat_schedule") == {"tick": "updated"}
    job = kernel.get_job("tick")
    assert job.revision == 2 and job.spec["schedule"] == {"every": 120.0}


def test_a_spec_the_kernel_refuses_is_logged_and_the_others_still_apply(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kernel = memory_kernel()
    specs = beat_schedule_specs({"beat_schedule": {
        "bad": {"task": "t", "schedule": 5, "kernel": {"overlap": "sometimes"}},
        "good": {"task": "t", "schedule": 5},
    }})  # fmt: skip
    with caplog.at_level(logging.ERROR, logger="celery_kernel.beat"):
        outcome = apply_specs(kernel, specs, source="beat_schedule")
    assert outcome == {"bad": "refused: INVALID_ARGUMENT", "good": "created"}
    [record] = caplog.records
    assert "overlap" in record.getMessage() and getattr(record, "job_id", None) == "bad"
    assert [j.id for j in kernel.list_jobs()] == ["good"]


def test_beat_applies_the_apps_beat_schedule_when_it_starts(
    open_beat: Callable[..., Beat], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'kernel.db'}"
    beat_schedule = {
        "every-minute": {"task": "tests.noop", "schedule": 60.0},
        "nightly": {"task": "tests.noop", "schedule": crontab(minute=0, hour=2),
                    "kernel": {"catchup": {"policy": "none"}}},
    }  # fmt: skip
    beat = open_beat(url, beat_schedule=beat_schedule, timezone="Europe/Berlin")
    jobs = {j.id: j for j in beat.kernel.list_jobs()}
    assert set(jobs) == {"every-minute", "nightly"}
    assert jobs["nightly"].spec["schedule"] == {"cron": "0 2 * * *", "timezone": "Europe/Berlin"}
    assert jobs["nightly"].spec["catchup"]["policy"] == "none"
    # A Beat started again with the same configuration changes nothing.
    again = open_beat(url, beat_schedule=beat_schedule, timezone="Europe/Berlin")
    assert {j.id: j.revision for j in again.kernel.list_jobs()} == {"every-minute": 1, "nightly": 1}
