"""KernelScheduler as Celery's Beat runs it: ticks materialise firings through the kernel,
pump hints to the broker, and leave manual runs and one-shot jobs to their own rules."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.beat.conftest import Beat


def _queued_messages(tmp_path: Path) -> int:
    """Hints waiting in the embedded (filesystem) broker the harness runs in ``tmp_path``."""
    return sum(1 for f in (tmp_path / "var" / "broker" / "queue").iterdir() if f.is_file())


def test_a_tick_materialises_due_firings_and_publishes_their_hints(
    sqlite_beat: Beat, tmp_path: Path
) -> None:
    beat = sqlite_beat
    beat.define()
    beat.tick()
    assert beat.occurrences() == [] and _queued_messages(tmp_path) == 0
    job = beat.kernel.get_job("job")
    assert job.planned and job.next_fire_at == beat.minute(1)

    beat.tick(beat.minute(1))
    [occ] = beat.occurrences()
    assert (occ.trigger_key, occ.status, occ.scheduled_for) == (
        beat.key(1),
        "queued",
        beat.minute(1),
    )
    assert occ.dispatched_at == beat.minute(1)
    assert _queued_messages(tmp_path) == 1
    [heartbeat] = beat.kernel.beats()
    assert heartbeat.id == beat.scheduler.beat_id and heartbeat.last_tick_at == beat.minute(1)


def test_tick_returns_the_configured_interval_and_info_names_the_database(
    open_beat: Callable[..., Beat], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'kernel.db'}"
    beat = open_beat(url, kernel_beat_interval=2.5)
    assert beat.scheduler.tick() == 2.5
    assert url in beat.scheduler.info and beat.scheduler.beat_id in beat.scheduler.info


def test_two_beats_on_one_database_make_each_firing_once(
    open_beat: Callable[..., Beat], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'kernel.db'}"
    first, second = open_beat(url), open_beat(url)
    first.define(overlap="allow")
    for n in range(0, 6):
        at = first.minute(n + 0.5)
        first.tick(at)
        second.tick(at)
    assert first.keys() == [first.key(n) for n in range(1, 6)]
    assert {b.id for b in first.kernel.beats()} == {
        first.scheduler.beat_id,
        second.scheduler.beat_id,
    }


def test_only_due_jobs_are_planned_each_tick(sqlite_beat: Beat) -> None:
    beat = sqlite_beat
    for n in range(50):
        beat.define(f"hourly-{n}", schedule={"every": "1h"})
    beat.define("minutely", overlap="allow")
    beat.tick()
    assert beat.kernel.due_jobs() == []
    beat.clock.set(beat.minute(1))
    assert [j.id for j in beat.kernel.due_jobs()] == ["minutely"]
    beat.tick()
    assert beat.keys("minutely") == [beat.key(1)]
    assert all(beat.occurrences(f"hourly-{n}") == [] for n in range(50))


def test_run_now_on_a_disabled_job_runs_once_and_leaves_the_schedule_alone(
    sqlite_beat: Beat,
) -> None:
    beat = sqlite_beat
    beat.define(enabled=False)
    beat.tick()
    before = beat.kernel.get_job("job")

    first = beat.kernel.run_now("job", request_id="req-1", operator="ops")
    retried = beat.kernel.run_now("job", request_id="req-1", operator="ops")
    assert not first.deduplicated and retried.deduplicated
    assert retried.occurrence.id == first.occurrence.id
    beat.tick(beat.minute(3))
    assert beat.keys() == ["manual:req-1"]
    assert beat.kernel.get_job("job") == before
    assert beat.kernel.claim(first.occurrence.id, owner="w1") is not None


def test_run_now_between_ticks_does_not_move_the_cursor(sqlite_beat: Beat) -> None:
    beat = sqlite_beat
    beat.define(overlap="allow")
    beat.tick()
    beat.clock.set(beat.minute(0.75))
    manual = beat.kernel.run_now("job", request_id="req-2", operator="ops", force=True)
    job = beat.kernel.get_job("job")
    assert (job.next_trigger_key, job.next_fire_at) == (beat.key(1), beat.minute(1))

    beat.tick(beat.minute(1))
    beat.tick(beat.minute(2))
    assert beat.keys() == ["manual:req-2", beat.key(1), beat.key(2)]
    assert manual.occurrence.scheduled_for == beat.minute(0.75)


def test_a_one_shot_fires_once_even_when_late_and_then_is_disabled(sqlite_beat: Beat) -> None:
    beat = sqlite_beat
    beat.define("at", schedule={"at": beat.minute(3).isoformat()})
    beat.define("in", schedule={"in": "90s"})  # 12:02:00, from the definition at 12:00:30
    beat.tick()
    beat.tick(beat.minute(10))  # Beat was down: both are late, `latest` still fires each

    assert beat.keys("at") == [beat.key(3, "at")]
    assert beat.keys("in") == [beat.key(2, "at")]
    for job_id in ("at", "in"):
        job = beat.kernel.get_job(job_id)
        assert job.planned and job.next_trigger_key is None and not job.enabled
    beat.tick(beat.minute(20))
    assert len(beat.occurrences("at")) == len(beat.occurrences("in")) == 1


def test_a_late_one_shot_under_catchup_none_is_recorded_not_lost(sqlite_beat: Beat) -> None:
    beat = sqlite_beat
    beat.define(schedule={"at": beat.minute(3).isoformat()}, catchup={"policy": "none"})
    beat.tick()
    beat.tick(beat.minute(3) + timedelta(minutes=5))
    assert beat.skips() == {beat.key(3, "at"): "catchup_none"}


def test_a_job_beat_cannot_plan_stops_no_other_job(sqlite_beat: Beat) -> None:
    import json

    import sqlalchemy as sa

    from kernel.db.schema import jobs

    sqlite_beat.define("broken")
    sqlite_beat.define("fine")
    # A definition stored before today's checks (apply refuses it now): an interval no
    # date arithmetic can take.
    with sqlite_beat.kernel.engine.begin() as conn:
        spec = json.loads(
            conn.execute(sa.select(jobs.c.spec).where(jobs.c.id == "broken")).scalar_one()
        )
        spec["schedule"] = {"every": 1e300}
        conn.execute(sa.update(jobs).where(jobs.c.id == "broken").values(spec=json.dumps(spec)))
    sqlite_beat.clock.set(sqlite_beat.minute(3.5))
    sqlite_beat.caplog.clear()
    sqlite_beat.scheduler.tick()
    assert sqlite_beat.keys("fine")[-1] == sqlite_beat.key(3)
    failed = [
        r for r in sqlite_beat.caplog.records if getattr(r, "action", None) == "materialise_failed"
    ]
    assert [getattr(r, "job_id", None) for r in failed] == ["broken"]
    assert not [
        r for r in sqlite_beat.caplog.records if getattr(r, "action", None) == "tick_step_failed"
    ]


def _store_unplannable_schedule(beat: Beat, job_id: str) -> None:
    """Store, behind apply's back, a schedule no date arithmetic can take (as a definition
    stored before today's checks would be)."""
    import json

    import sqlalchemy as sa

    from kernel.db.schema import jobs

    with beat.kernel.engine.begin() as conn:
        spec = json.loads(
            conn.execute(sa.select(jobs.c.spec).where(jobs.c.id == job_id)).scalar_one()
        )
        spec["schedule"] = {"every": 1e300}
        conn.execute(sa.update(jobs).where(jobs.c.id == job_id).values(spec=json.dumps(spec)))


def test_a_job_beat_cannot_plan_is_its_event_and_a_status_and_doctor_finding(beat: Beat) -> None:
    from celery_app import operations

    beat.define("broken")
    beat.define("fine")
    _store_unplannable_schedule(beat, "broken")
    for minute in (3.5, 4.5):  # Beat.tick refuses a tick that logged materialise_failed
        beat.clock.set(beat.minute(minute))
        beat.scheduler.tick()
    assert beat.keys("fine")[-1] == beat.key(4)
    # Once per revision, however many ticks failed.
    [event] = beat.kernel.events(job_id="broken", types=["job_unplannable"])
    assert event.data["revision"] == 1 and event.data["error"]
    [finding] = beat.kernel.status()["unplannable"]
    assert (finding["job_id"], finding["revision"]) == ("broken", 1)
    assert finding["error"] == event.data["error"]
    warnings = operations.status(beat.kernel, beat.scheduler.app)["warnings"]
    assert [w for w in warnings if "broken" in w and finding["error"] in w]
    [check] = [f for f in beat.kernel.checkup() if f.name == "schedules"]
    assert check.status == "fail" and "broken" in check.detail and finding["error"] in check.detail

    # A new revision clears it until Beat fails to plan that one too.
    beat.kernel.apply_job({**beat.kernel.get_job("broken").spec, "schedule": {"every": 120}})
    assert beat.kernel.status()["unplannable"] == []
    assert [f.status for f in beat.kernel.checkup() if f.name == "schedules"] == ["ok"]
    beat.tick(beat.minute(6.5))
    assert beat.kernel.status()["unplannable"] == []
    assert len(beat.kernel.events(job_id="broken", types=["job_unplannable"])) == 1


def test_a_later_fire_of_the_revision_clears_its_plan_error(beat: Beat) -> None:
    beat.define("job")
    beat.tick()
    assert beat.kernel.record_unplannable("job", revision=1, error="FIRST: refused")
    # Once per revision, whichever Beat asks: the first error stays, no second event.
    assert not beat.kernel.record_unplannable("job", revision=1, error="SECOND: refused")
    assert not beat.kernel.record_unplannable("job", revision=2, error="no such revision")
    assert [f["error"] for f in beat.kernel.status()["unplannable"]] == ["FIRST: refused"]
    assert len(beat.kernel.events(job_id="job", types=["job_unplannable"])) == 1
    beat.tick(beat.minute(1))
    assert beat.keys() == [beat.key(1)]
    assert beat.kernel.status()["unplannable"] == []
