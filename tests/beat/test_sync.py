"""``beat_schedule`` entries become kernel job definitions: what each Celery schedule means,
what the ``kernel`` key overrides, what is refused, and when a revision is made."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from celery import Celery
from celery.schedules import BaseSchedule, crontab, schedule

from beat_schedule.sync import apply_specs, entry_to_spec, read_beat_schedule, sync_beat_schedule
from kernel import InvalidArgument, Kernel
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


def test_a_crontab_reads_the_zone_of_the_synced_app_whichever_app_made_it() -> None:
    # Celery's Beat binds every entry's crontab to its own app (maybe_schedule).
    app = Celery("zoned", set_as_current=False)
    app.conf.timezone = "America/New_York"
    bound = crontab(hour=3, minute=0, app=app)
    assert _schedule_of(bound, timezone="Europe/Berlin")["timezone"] == "Europe/Berlin"
    conf = {
        "timezone": "Asia/Kolkata",
        "beat_schedule": {"daily": {"task": "t", "schedule": crontab(minute=0, hour=9)}},
    }
    [spec] = read_beat_schedule(conf).specs
    assert spec["schedule"] == {"cron": "0 9 * * *", "timezone": "Asia/Kolkata"}


@pytest.mark.parametrize(
    ("settings", "zone"),
    [
        ({}, "UTC"),
        ({"timezone": "Europe/Berlin", "TIME_ZONE": "US/Pacific"}, "Europe/Berlin"),
        ({"TIME_ZONE": "US/Pacific"}, "US/Pacific"),
        ({"enable_utc": False}, "Pacific/Auckland"),
    ],
    ids=["default", "timezone", "django", "local"],
)
def test_the_zone_is_the_one_celery_resolves(
    settings: dict[str, Any], zone: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As ``app.timezone``: timezone, Django's TIME_ZONE, UTC, or local without enable_utc."""
    monkeypatch.setenv("TZ", "Pacific/Auckland")
    app = Celery("zoned", set_as_current=False)
    app.conf.update(settings)
    app.conf.beat_schedule = {"daily": {"task": "t", "schedule": crontab(minute=0, hour=9)}}
    [spec] = read_beat_schedule(app.conf).specs
    assert spec["schedule"]["timezone"] == zone
    if zone != "Pacific/Auckland":  # Celery's local zone is a fixed-offset LocalTimezone
        assert str(app.timezone) == zone


def test_a_change_of_the_apps_zone_is_a_new_revision() -> None:
    kernel = memory_kernel()
    entries = {"daily": {"task": "t", "schedule": crontab(minute=0, hour=0)}}
    read = read_beat_schedule({"beat_schedule": entries})
    assert apply_specs(kernel, read.specs, source="test") == {"daily": "created"}
    moved = read_beat_schedule({"TIME_ZONE": "US/Pacific", "beat_schedule": entries})
    assert apply_specs(kernel, moved.specs, source="test") == {"daily": "updated"}
    assert kernel.get_job("daily").spec["schedule"]["timezone"] == "US/Pacific"


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
        "payload": {
            "task": "reports.build",
            "args": [1, "eu"],
            "kwargs": {"full": True},
            # What Celery's Beat gives the body's self.request (its own header).
            "request": {"headers": {"celery_beat_task": True}},
        },
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
    specs = read_beat_schedule({"beat_schedule": entries}).specs
    assert apply_specs(kernel, specs, source="beat_schedule") == {"tick": "created"}
    # The same meaning spelled another way (60 seconds as a number) is no change.
    same = read_beat_schedule({"beat_schedule": {"tick": {"task": "t", "schedule": 60}}}).specs
    assert apply_specs(kernel, same, source="beat_schedule") == {"tick": "unchanged"}
    assert kernel.get_job("tick").revision == 1

    changed = read_beat_schedule({"beat_schedule": {"tick": {"task": "t", "schedule": 120}}}).specs
    assert apply_specs(kernel, changed, source="beat_schedule") == {"tick": "updated"}
    job = kernel.get_job("tick")
    assert job.revision == 2 and job.spec["schedule"] == {"every": 120.0}


def test_a_spec_the_kernel_refuses_is_logged_and_the_others_still_apply(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kernel = memory_kernel()
    # Read, the bad entry would be refused already (test_schedule_findings); applied
    # anyway, the kernel refuses it alone.
    specs = [
        entry_to_spec("bad", {"task": "t", "schedule": 5, "kernel": {"overlap": "sometimes"}}),
        entry_to_spec("good", {"task": "t", "schedule": 5}),
    ]
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


def test_entries_whose_names_make_one_job_id_are_both_refused_naming_both() -> None:
    read = read_beat_schedule({"beat_schedule": {
        "cleanup tmp": {"task": "t", "schedule": 60},
        "cleanup-tmp": {"task": "t", "schedule": 120},
        "other": {"task": "t", "schedule": 60},
    }})  # fmt: skip
    assert [spec["id"] for spec in read.specs] == ["other"]
    refused = {e.name: e.refused for e in read.entries if e.refused}
    assert set(refused) == {"cleanup tmp", "cleanup-tmp"}
    assert "'cleanup tmp' and 'cleanup-tmp'" in str(refused["cleanup-tmp"])
    # Refused entries still exist: their job is kept as it was, not retired.
    assert read.owned == {"cleanup-tmp": "cleanup-tmp", "other": "other"}


@pytest.fixture
def source_kernel(kernel_url: str) -> Iterator[Kernel]:
    """A migrated kernel on SQLite and, in a second run, on PostgreSQL."""
    opened = Kernel.open(kernel_url, migrate_schema=True)
    try:
        yield opened
    finally:
        opened.close()


def test_a_removed_entry_is_disabled_with_an_event_and_comes_back_enabled(
    source_kernel: Kernel, caplog: pytest.LogCaptureFixture
) -> None:
    kernel = source_kernel
    both = {"keep": {"task": "t", "schedule": 60}, "gone": {"task": "t", "schedule": 60}}
    assert sync_beat_schedule(kernel, read_beat_schedule({"beat_schedule": both})) == {
        "keep": "created",
        "gone": "created",
    }
    kernel.apply_job({"id": "from-a-file", "kind": "task", "payload": {"task": "t"}})
    with caplog.at_level(logging.INFO, logger="celery_kernel.beat"):
        outcome = sync_beat_schedule(
            kernel, read_beat_schedule({"beat_schedule": {"keep": both["keep"]}})
        )
    assert outcome == {"keep": "unchanged", "gone": "retired"}
    assert "job gone disabled: its entry is no longer in beat_schedule" in caplog.text
    gone = kernel.get_job("gone")
    assert not gone.enabled and gone.revision == 1
    assert kernel.get_job("from-a-file").enabled and kernel.get_job("keep").enabled
    assert [e.type for e in kernel.events(job_id="gone", limit=10)][-2:] == [
        "job_disabled",
        "job_retired",
    ]
    # Starting again without it changes nothing; putting it back enables it.
    again = sync_beat_schedule(
        kernel, read_beat_schedule({"beat_schedule": {"keep": both["keep"]}})
    )
    assert again == {"keep": "unchanged"}
    assert sync_beat_schedule(kernel, read_beat_schedule({"beat_schedule": both}))["gone"] == (
        "restored"
    )
    assert kernel.get_job("gone").enabled


def test_task_settings_and_options_become_job_fields_hint_options_or_refusals() -> None:
    app = Celery("settings-test", set_as_current=False)

    @app.task(name="flaky", autoretry_for=(OSError,), max_retries=4, retry_backoff=2,
              retry_backoff_max=60, soft_time_limit=30, time_limit=40)  # fmt: skip
    def flaky() -> None: ...

    @app.task(name="plain")
    def plain() -> None: ...

    @app.task(name="stale", expires=45)
    def stale() -> None: ...

    conf = {"beat_schedule": {
        "f": {"task": "flaky", "schedule": 60,
              "options": {"queue": "q1", "priority": 3, "routing_key": "rk", "expires": 30,
                          "headers": {"h": "1"}}},
        "p": {"task": "plain", "schedule": 60},
        "u": {"task": "unknown", "schedule": 60},
        "late": {"task": "plain", "schedule": 60, "options": {"countdown": 5, "link": "x"}},
        "rel": {"task": "plain", "schedule": 60, "relative": True},
        "at": {"task": "plain", "schedule": 60,
               "options": {"expires": datetime(2030, 1, 1, tzinfo=UTC)}},
        "own": {"task": "stale", "schedule": 60},
    }}  # fmt: skip
    read = read_beat_schedule(conf, app.tasks)
    specs = {spec["id"]: spec for spec in read.specs}
    assert specs["f"]["queue"] == "q1" and specs["f"]["timeout"] == 30.0
    assert specs["f"]["max_attempts"] == 5
    assert specs["f"]["retry"] == {"backoff": 2.0, "factor": 2.0, "max": 60.0, "jitter": 0.5}
    # Celery's max_retries (3) bounds self.retry(): 4 attempts, any other exception final.
    assert specs["p"]["max_attempts"] == 4 and "timeout" not in specs["p"]
    assert specs["p"]["retry"] == {"backoff": 180.0, "factor": 1.0, "max": 180.0, "jitter": 0.0}
    assert "max_attempts" not in specs["u"]
    # expires is the job's start deadline (the entry's, else the task's), not the hint's.
    assert specs["f"]["expires"] == 30.0 and specs["own"]["expires"] == 45.0
    assert "expires" not in specs["p"]
    # The entry's priority is its job's (its runs', claimed and hinted by it).
    assert specs["f"]["priority"] == 3 and "priority" not in specs["p"]
    assert read.hints == {"f": {"routing_key": "rk", "headers": {"h": "1"}}}
    warnings = {e.name: " ".join(e.warnings) for e in read.entries}
    refused = {e.name: e.refused for e in read.entries if e.refused}
    # Celery would honour these; the kernel refuses the entry naming them, never drops them.
    assert set(refused) == {"late", "rel", "at"} and not {"late", "rel", "at"} & set(specs)
    assert "options.expires" in refused["at"] and "number of seconds" in refused["at"]
    assert "options countdown, link are not honoured" in refused["late"]
    assert "'relative' is not honoured" in refused["rel"]
    assert "task 'unknown' is not registered" in warnings["u"]
    assert warnings["p"] == "" and warnings["f"] == ""


def test_the_pump_publishes_hints_with_the_entrys_options_and_celerys_time_limits(
    open_beat: Callable[..., Beat], tmp_path: Path
) -> None:
    beat_schedule = {"timed": {
        "task": "tests.noop", "schedule": 60.0,
        "options": {"priority": 7, "routing_key": "celery", "headers": {"team": "ops"}},
        "kernel": {"timeout": 30},
    }}  # fmt: skip
    beat = open_beat(f"sqlite:///{tmp_path / 'kernel.db'}", beat_schedule=beat_schedule)
    # Beat defined the job on the real clock; tick past its first firing.
    later = datetime.now(UTC) + timedelta(minutes=2)
    beat.tick(later)
    beat.tick(later + timedelta(seconds=1))
    [message] = [
        json.loads(f.read_text())
        for f in (tmp_path / "var" / "broker" / "queue").iterdir()
        if f.is_file()
    ]
    headers = message["headers"]
    assert headers["task"] == "kernel.run_occurrence" and headers["shadow"] == "timed"
    assert headers["timelimit"] == [35.0, 30.0] and headers["team"] == "ops"
    assert message["properties"]["priority"] == 7
    assert message["properties"]["delivery_info"]["routing_key"] == "celery"


def test_beat_refuses_a_job_file_naming_a_kind_no_adapter_runs(
    open_beat: Callable[..., Beat],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    jobs_file = tmp_path / "jobs.json"
    jobs_file.write_text(json.dumps({"jobs": [
        {"id": "ok", "kind": "task", "payload": {"task": "tests.noop"}},
        {"id": "typo", "kind": "teleport", "payload": {}},
    ]}))  # fmt: skip
    url = f"sqlite:///{tmp_path / 'kernel.db'}"
    with pytest.raises(SystemExit) as refused:  # Beat does not start on it
        open_beat(url, kernel_jobs_file=str(jobs_file))
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "'teleport'" in err and "callable, http, shell, task, watchdog" in err
    assert not (tmp_path / "kernel.db").exists()
    monkeypatch.setenv("KERNEL_WORKER_KINDS", "teleport")
    assert {j.id for j in open_beat(url, kernel_jobs_file=str(jobs_file)).kernel.list_jobs()} == {
        "ok",
        "typo",
    }


def test_beat_applies_a_job_files_pools_with_its_jobs(
    open_beat: Callable[..., Beat], tmp_path: Path
) -> None:
    jobs_file = tmp_path / "jobs.json"
    jobs_file.write_text(json.dumps({
        "pools": {"db": {"limit": 2}},
        "jobs": [{"id": "ok", "kind": "task", "payload": {"task": "tests.noop"}, "pool": "db"}],
    }))  # fmt: skip
    beat = open_beat(f"sqlite:///{tmp_path / 'kernel.db'}", kernel_jobs_file=str(jobs_file))
    assert [(p.name, p.limit) for p in beat.kernel.pools()] == [("db", 2)]
    assert [j.id for j in beat.kernel.list_jobs()] == ["ok"]


@pytest.mark.parametrize(
    ("broker", "entry", "default", "kernel", "hinted"),
    [
        # AMQP (RabbitMQ): higher first, as the kernel; the numbers pass through.
        ("amqp://guest@localhost//", 255, 3, (255, 3), (255, 3)),
        # Redis: Celery runs 0 (and a message with none) first, 9 last.
        ("redis://localhost:6379/0", 0, 7, (9, 2), (0, 7)),
    ],
)
def test_a_priority_keeps_celerys_order_on_the_apps_broker(
    broker: str,
    entry: int,
    default: int,
    kernel: tuple[int, ...],
    hinted: tuple[int | None, ...],
) -> None:
    from beat_schedule.task_settings import broker_priority

    app = Celery("prio", broker=broker, set_as_current=False)
    app.conf.task_default_priority = default  # each task's ``priority``

    name = f"plain-{default}"

    @app.task(name=name)
    def plain() -> None: ...

    conf = app.conf
    conf.beat_schedule = {
        "urgent": {"task": name, "schedule": 60, "options": {"priority": entry}},
        "plain": {"task": name, "schedule": 60},
    }
    specs = {s["id"]: s for s in read_beat_schedule(conf, app.tasks).specs}
    got = tuple(specs[name].get("priority", 0) for name in ("urgent", "plain"))
    assert got == kernel
    # The hint goes out with Celery's number again: the broker orders it as Celery would.
    assert tuple(broker_priority(conf, k) for k in got) == hinted
    assert broker_priority(conf, 0) is None  # the kernel's default: Celery's own default
    conf.beat_schedule = {"bad": {"task": name, "schedule": 60, "options": {"priority": 300}}}
    [refused] = read_beat_schedule(conf, app.tasks).entries
    assert refused.refused is not None and "options.priority" in refused.refused
    assert "300" in refused.refused


def test_an_entrys_time_limits_are_its_jobs_timeout() -> None:
    """``options.soft_time_limit``/``time_limit`` were refused; now the soft limit (else
    the hard one) is the job's timeout, as a task's own limits are (issue 38 item 7)."""
    conf = {"beat_schedule": {
        "soft": {"task": "t", "schedule": 60, "options": {"soft_time_limit": 4, "time_limit": 9}},
        "hard": {"task": "t", "schedule": 60, "options": {"time_limit": 7}},
    }}  # fmt: skip
    read = read_beat_schedule(conf)
    assert [e.refused for e in read.entries] == [None, None]
    assert {s["id"]: s["timeout"] for s in read.specs} == {"soft": 4, "hard": 7}
    assert read.hints == {}


def test_a_tasks_rate_limit_is_its_entrys_job_as_celery_reads_it() -> None:
    """A task's ``rate_limit`` is its job's, kept by the kernel across workers (issue 38
    item 7); none or 0 is no limit, and ``worker_disable_rate_limits`` drops them, as
    under Celery; a limit Celery could not read refuses the entry naming it."""
    app = Celery("rate", set_as_current=False)
    limits = {"slow": "20/m", "number": 2, "zero": 0, "none": None, "bad": "20/d"}

    def body() -> None: ...

    for name, limit in limits.items():
        app.task(name=name, rate_limit=limit)(body)
    app.conf.beat_schedule = {name: {"task": name, "schedule": 60} for name in limits}
    read = read_beat_schedule(app.conf, app.tasks)
    specs = {s["id"]: s for s in read.specs}
    got = {name: specs[name].get("rate_limit") for name in ("slow", "number", "zero", "none")}
    assert got == {"slow": "20/m", "number": 2, "zero": None, "none": None}
    [bad] = [e for e in read.entries if e.name == "bad"]
    assert bad.refused is not None and "rate_limit" in bad.refused and "20/d" in bad.refused
    app.conf.worker_disable_rate_limits = True
    app.conf.beat_schedule = {"slow": {"task": "slow", "schedule": 60}}
    [spec] = read_beat_schedule(app.conf, app.tasks).specs
    assert "rate_limit" not in spec
