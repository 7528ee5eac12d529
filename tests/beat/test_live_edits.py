"""Editing a job while Beat runs: the next tick follows the new revision (SPEC I5).

Occurrences already created keep the definition they were created under; a firing
is made once whatever revision is current (the unique firing key), and a firing
that was due but not yet materialised when the edit landed is not lost.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from celery_app.beat import plan_job

if TYPE_CHECKING:
    from tests.beat.conftest import Beat


def _revise(beat: Beat, **changes: Any) -> None:
    job = beat.kernel.get_job("job")
    _, changed = beat.kernel.revise_job({**job.spec, **changes}, expected_revision=job.revision)
    assert changed


def test_a_revision_takes_effect_at_the_next_tick_and_old_occurrences_keep_theirs(
    beat: Beat,
) -> None:
    beat.define(overlap="allow", payload={"task": "tests.noop", "args": [1]})
    beat.tick()
    beat.tick(beat.minute(1))
    beat.clock.set(beat.minute(1.5))
    _revise(beat, payload={"task": "tests.noop", "args": [2]}, queue="reports")
    beat.tick()
    beat.tick(beat.minute(2))

    made = [(o.trigger_key, o.job_revision, o.payload["args"], o.queue) for o in beat.occurrences()]
    assert made == [(beat.key(1), 1, [1], "celery"), (beat.key(2), 2, [2], "reports")]


def test_a_changed_schedule_replaces_the_old_one_from_the_next_tick(beat: Beat) -> None:
    beat.define(overlap="allow")
    beat.tick()
    beat.tick(beat.minute(1))
    beat.clock.set(beat.minute(1.5))
    _revise(beat, schedule={"every": "5m"})
    for n in range(2, 11):
        beat.tick(beat.minute(n))

    assert beat.keys() == [beat.key(1), beat.key(5), beat.key(10)]
    assert [o.job_revision for o in beat.occurrences()] == [1, 2, 2]


def test_a_firing_already_made_is_not_made_again_under_the_new_revision(beat: Beat) -> None:
    beat.define(overlap="allow")
    beat.tick()
    beat.tick(beat.minute(1))
    # Revised at the very instant of the firing just materialised: the new
    # revision's planning starts there, and finds it made.
    _revise(beat, max_attempts=7)
    beat.tick()
    beat.tick(beat.minute(1.5))
    beat.tick(beat.minute(2))

    assert [(o.trigger_key, o.job_revision) for o in beat.occurrences()] == [
        (beat.key(1), 1),
        (beat.key(2), 2),
    ]
    assert [o.max_attempts for o in beat.occurrences()] == [3, 7]


def test_a_firing_due_when_the_edit_lands_is_made_under_the_new_revision(beat: Beat) -> None:
    beat.define(overlap="allow")
    beat.tick()
    beat.tick(beat.minute(1))
    # 12:02 is due, but the edit lands before Beat's next tick materialises it.
    beat.clock.set(beat.minute(2) + timedelta(milliseconds=400))
    _revise(beat, max_attempts=7)
    beat.tick(beat.minute(2) + timedelta(milliseconds=900))

    assert [(o.trigger_key, o.job_revision) for o in beat.occurrences()] == [
        (beat.key(1), 1),
        (beat.key(2), 2),
    ]


def test_an_edit_during_downtime_keeps_the_catch_up_owed(beat: Beat) -> None:
    beat.define(overlap="allow", catchup={"policy": "all", "window": "1h"})
    beat.tick()
    beat.tick(beat.minute(1))
    beat.clock.set(beat.minute(4.5))  # Beat is down; an operator edits the job
    _revise(beat, max_attempts=7)
    beat.tick(beat.minute(5.5))

    assert beat.keys(status="queued") == [beat.key(n) for n in range(1, 6)]
    assert [o.job_revision for o in beat.occurrences()] == [1, 2, 2, 2, 2]


def test_a_stale_beat_changes_nothing_after_an_edit(beat: Beat) -> None:
    """A Beat that planned from the old revision loses the compare-and-set."""
    beat.define(overlap="allow")
    beat.tick()
    beat.clock.set(beat.minute(1))
    seen = beat.kernel.get_job("job")
    plan = plan_job(beat.kernel, seen, beat.kernel.now())
    _revise(beat, max_attempts=7)
    assert plan.next_cursor is not None
    report = beat.kernel.fire(
        "job",
        expected_revision=seen.revision,
        expected_cursor=seen.next_trigger_key,
        firings=[(f.trigger_key, f.at) for f in plan.fire],
        next_cursor=(plan.next_cursor.trigger_key, plan.next_cursor.at),
    )
    assert report.stale and beat.occurrences() == []
    beat.tick()
    assert [(o.trigger_key, o.job_revision) for o in beat.occurrences()] == [(beat.key(1), 2)]


def test_disabling_a_job_stops_its_firings_and_enabling_does_not_burst(beat: Beat) -> None:
    """A disabled job has no cursor and no records for the firings it did not have;
    "why did 12:03 not run?" is answered by the job's disable/enable events."""
    beat.define(overlap="allow", catchup={"policy": "all"})
    beat.tick()
    beat.tick(beat.minute(1))
    beat.clock.set(beat.minute(1.5))
    beat.kernel.set_job_enabled("job", False)
    for n in range(2, 6):
        beat.tick(beat.minute(n))
    job = beat.kernel.get_job("job")
    assert not job.enabled and job.next_trigger_key is None
    assert beat.keys() == [beat.key(1)]

    beat.clock.set(beat.minute(5.5))
    beat.kernel.set_job_enabled("job", True)
    beat.tick()
    beat.tick(beat.minute(6))
    assert beat.keys() == [beat.key(1), beat.key(6)]
    toggles = [
        (e.type, e.at)
        for e in beat.kernel.events(job_id="job", limit=100)
        if e.type in ("job_disabled", "job_enabled")
    ]
    assert toggles == [("job_disabled", beat.minute(1.5)), ("job_enabled", beat.minute(5.5))]
