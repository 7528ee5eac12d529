"""Backfill (issue 29): one occurrence per planned firing in a range, with the schedule's
own trigger keys (twice creates nothing the second time), admitted by overlap and
max_queued or queued in order with ``sequential``; a range over 10,000 firings is refused
without ``max``; nothing is written on a refusal."""

from __future__ import annotations

from typing import Any

import pytest

from celery_app.operations import backfill
from kernel import InvalidArgument, RevisionConflict

from .conftest import Beat


def _backfill(beat: Beat, start_min: float, end_min: float, **options: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "params": None,
        "max_firings": None,
        "dry_run": False,
        "sequential": False,
        "operator": "ops",
        **options,
    }
    return backfill(beat.kernel, "job", beat.minute(start_min), beat.minute(end_min), **settings)


def test_a_backfill_makes_each_firing_once_with_the_schedules_keys(beat: Beat) -> None:
    beat.define(overlap="allow")
    first = _backfill(beat, -60, -55.5)  # 11:00 .. 11:04:30
    keys = [beat.key(n) for n in range(-60, -55)]
    assert [o.trigger_key for o in beat.occurrences()] == keys
    assert len(first["created"]) == 5 and first["existing"] == []

    second = _backfill(beat, -62, -55.5)  # overlaps the first range by five firings
    assert len(second["created"]) == 2
    assert [e["trigger_key"] for e in second["existing"]] == keys
    again = _backfill(beat, -62, -55.5)
    assert again["created"] == [] and len(again["existing"]) == 7
    backfilled = [
        e for e in beat.kernel.events(job_id="job", limit=50) if e.type == "job_backfilled"
    ]
    assert [e.data["created"] for e in backfilled] == [5, 2, 0]


def test_a_backfill_is_admitted_by_overlap_and_max_queued(beat: Beat) -> None:
    beat.define("job", overlap="skip")
    _backfill(beat, -60, -56)
    assert [o.status for o in beat.occurrences()] == ["queued"] + ["skipped"] * 4
    assert set(beat.skips().values()) == {"overlap"}

    beat.define("queued", overlap="queue", max_queued=2)
    backfill(
        beat.kernel, "queued", beat.minute(-60), beat.minute(-56), params=None,
        max_firings=None, dry_run=False, sequential=False, operator="ops",
    )  # fmt: skip
    assert beat.skips("queued") == {beat.key(-57): "queue_full", beat.key(-56): "queue_full"}


def test_a_sequential_backfill_queues_every_firing_to_run_one_at_a_time_in_order(
    beat: Beat,
) -> None:
    beat.define(overlap="skip")
    made = _backfill(beat, -60, -57, sequential=True)
    runs = beat.occurrences()
    assert [o.status for o in runs] == ["queued"] * 4 and made["created"] == [o.id for o in runs]
    assert [o.available_at for o in runs] == sorted({o.available_at for o in runs})
    beat.clock.set(beat.minute(1))  # every one of them available
    # Whichever hint a worker holds first, the earliest starts first and one at a time.
    assert beat.kernel.claim(runs[2].id, owner="w3") is None
    first = beat.kernel.claim(runs[0].id, owner="w1")
    assert first is not None
    assert beat.kernel.claim(runs[1].id, owner="w2") is None  # one at a time
    beat.kernel.succeed(runs[0].id, owner="w1", fence=first.occurrence.fence)
    assert beat.kernel.claim(runs[3].id, owner="w3") is None
    assert beat.kernel.claim(runs[1].id, owner="w2") is not None


def test_a_run_now_of_a_disabled_job_is_not_held_behind_its_waiting_firings(beat: Beat) -> None:
    beat.define(overlap="queue")
    _backfill(beat, -60, -59, sequential=True)
    beat.kernel.set_job_enabled("job", False, operator="ops")
    made = beat.kernel.run_now("job", request_id="now-1", operator="ops").occurrence
    beat.clock.set(beat.minute(1))
    assert beat.kernel.claim(made.id, owner="w1") is not None  # the firings wait; it runs


def test_params_go_into_every_new_occurrence_of_a_backfill(beat: Beat) -> None:
    beat.define(overlap="allow", payload={"task": "tests.noop", "kwargs": {"day": "x"}})
    made = _backfill(beat, -60, -59, params={"kwargs": {"day": "2026-03-02"}})
    payloads = [beat.kernel.get_occurrence(i).payload for i in made["created"]]
    assert payloads == [{"task": "tests.noop", "args": [], "kwargs": {"day": "2026-03-02"}}] * 2


def test_a_dry_run_lists_the_firings_and_writes_nothing(beat: Beat) -> None:
    beat.define(overlap="allow")
    _backfill(beat, -60, -60)
    shown = _backfill(beat, -61, -59, dry_run=True)
    assert [(f["trigger_key"], f["existing"] is not None) for f in shown["firings"]] == [
        (beat.key(-61), False),
        (beat.key(-60), True),
        (beat.key(-59), False),
    ]
    assert len(beat.occurrences()) == 1


def test_a_range_over_ten_thousand_firings_needs_max(beat: Beat) -> None:
    beat.define(overlap="allow", schedule={"every": 1})
    with pytest.raises(InvalidArgument) as refused:
        _backfill(beat, -200, -30)  # 10,201 firings, one a second
    assert refused.value.field == "max" and "10000" in str(refused.value)
    assert beat.occurrences() == []
    made = _backfill(beat, -200, -30, max_firings=20)
    assert made["truncated"] and len(made["created"]) == 20
    assert beat.occurrences()[0].scheduled_for == beat.minute(-200)


@pytest.mark.parametrize(
    ("start", "end", "options", "field"),
    [
        (-50, -60, {}, "to"),
        (-60, -50, {"params": {"task": 7}}, "params.task"),
        (-60, -50, {"params": {"task": 7}, "dry_run": True}, "params.task"),
    ],
)
def test_bad_backfills_are_refused_naming_the_field_and_write_nothing(
    sqlite_beat: Beat, start: float, end: float, options: dict[str, Any], field: str
) -> None:
    sqlite_beat.define(overlap="allow")
    with pytest.raises(InvalidArgument) as refused:
        _backfill(sqlite_beat, start, end, **options)
    assert refused.value.field == field
    assert sqlite_beat.occurrences() == []


def test_a_backfill_planned_from_an_old_revision_is_refused(sqlite_beat: Beat) -> None:
    beat = sqlite_beat
    job = beat.define(overlap="allow")
    beat.kernel.revise_job({**job.spec, "schedule": {"every": 120}}, expected_revision=1)
    with pytest.raises(RevisionConflict):
        beat.kernel.backfill(
            "job",
            expected_revision=1,
            firings=[(beat.key(-60), beat.minute(-60))],
            operator="ops",
        )
    assert beat.occurrences() == []
