"""Schedule bounds (issue 29): ``start``, ``end`` and ``max_runs`` on a recurring schedule.

No firing before ``start`` or after ``end``; a job past its end or its runs is retired
(``job_disabled`` with the reason) and ``why`` says so. Bad bounds are refused naming the
field, nothing written.
"""

from __future__ import annotations

import pytest

from celery_app.operations import why_answer
from kernel import EventType, InvalidArgument

from .conftest import Beat


def _retired_because(beat: Beat, job_id: str = "job") -> list[str]:
    events = beat.kernel.events(job_id=job_id, limit=100)
    return [e.data.get("reason") for e in events if e.type == EventType.JOB_DISABLED]


def _run_queued(beat: Beat) -> list[str]:
    """Claim and settle every queued run as a worker would, the job retired or not
    (issue 39 item 1: the firing that retired it was never claimable); their statuses."""
    for occurrence in beat.occurrences(status="queued"):
        claim = beat.kernel.claim(occurrence.id, owner="w1")
        assert claim is not None, f"{occurrence.trigger_key} is not claimable"
        beat.kernel.succeed(occurrence.id, owner="w1", fence=claim.fence)
    return [o.status.value for o in beat.occurrences()]


def test_a_bounded_schedule_fires_only_between_start_and_end_then_retires(beat: Beat) -> None:
    beat.define(
        overlap="allow",
        schedule={
            "every": 60,
            "start": beat.minute(3).isoformat(),
            "end": beat.minute(5).isoformat(),
        },
    )
    for n in range(0, 8):
        beat.tick(beat.minute(n + 0.5))

    assert beat.keys() == [beat.key(3), beat.key(4), beat.key(5)]
    assert not beat.kernel.get_job("job").enabled
    assert _retired_because(beat) == ["schedule_ended"]
    assert _run_queued(beat) == ["succeeded"] * 3
    late = why_answer(beat.kernel, "job", beat.minute(7))
    assert late["outcome"] == "ended" and "retired" in late["reason"]
    early = why_answer(beat.kernel, "job", beat.minute(1))
    assert early["firing"]["trigger_key"] == beat.key(3)  # nothing before start


def test_max_runs_counts_the_runs_made_and_retires_the_job(beat: Beat) -> None:
    beat.define(overlap="allow", schedule={"every": 60, "max_runs": 2})
    beat.kernel.run_now("job", request_id="manual-1", operator="ops")  # not a scheduled run
    for n in range(0, 6):
        beat.tick(beat.minute(n + 0.5))

    assert beat.keys() == ["manual:manual-1", beat.key(1), beat.key(2)]
    assert _retired_because(beat) == ["max_runs_reached"]
    assert _run_queued(beat) == ["succeeded"] * 3
    later = why_answer(beat.kernel, "job", beat.minute(4))
    assert later["outcome"] == "disabled" and "max_runs" in later["reason"]

    beat.kernel.set_job_enabled("job", True)  # its runs stay spent: retired again, nothing made
    beat.tick(beat.minute(8.5))
    beat.tick(beat.minute(9.5))
    assert len(beat.occurrences()) == 3
    assert _retired_because(beat) == ["max_runs_reached", "max_runs_reached"]


def test_a_run_skipped_by_overlap_does_not_count_toward_max_runs(sqlite_beat: Beat) -> None:
    beat = sqlite_beat
    beat.define(overlap="skip", schedule={"every": 60, "max_runs": 2})
    beat.tick(beat.minute(1.5))  # 12:01 made, and queued: 12:02 is skipped by overlap
    beat.tick(beat.minute(2.5))
    first = beat.occurrences(status="queued")[0]
    claim = beat.kernel.claim(first.id, owner="w1")
    assert claim is not None
    beat.kernel.succeed(first.id, owner="w1", fence=claim.fence)
    beat.tick(beat.minute(3.5))
    beat.tick(beat.minute(4.5))

    assert beat.skips() == {beat.key(2): "overlap"}
    assert [o.trigger_key for o in beat.occurrences() if o.status != "skipped"] == [
        beat.key(1),
        beat.key(3),
    ]
    assert _retired_because(beat) == ["max_runs_reached"]


@pytest.mark.parametrize(
    ("schedule", "field", "words"),
    [
        (
            {"every": 60, "start": "2026-03-02T13:00:00Z", "end": "2026-03-02T12:00:00Z"},
            "schedule.end",
            "after start",
        ),
        (
            {"at": "2026-03-02T13:00:00Z", "end": "2026-03-03T00:00:00Z"},
            "schedule.end",
            "recurring",
        ),
        ({"in": "1h", "max_runs": 3}, "schedule.max_runs", "recurring"),
        ({"every": 60, "max_runs": 0}, "schedule.max_runs", "between 1"),
        ({"cron": "0 * * * *", "start": "tomorrow"}, "schedule.start", "ISO 8601"),
    ],
)
def test_bad_bounds_are_refused_naming_the_field_and_nothing_is_written(
    sqlite_beat: Beat, schedule: dict[str, object], field: str, words: str
) -> None:
    with pytest.raises(InvalidArgument) as refused:
        sqlite_beat.define(schedule=schedule)
    assert refused.value.field == field and words in str(refused.value)
    assert sqlite_beat.kernel.list_jobs() == []
