"""Jitter (issue 29): a firing comes due an offset later derived from (job, trigger key),
so two Beats agree on every firing; ``preview`` shows the jittered times; a jitter not
smaller than the interval is refused."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from beat_schedule.shaped import jitter_offset
from celery_app.operations import preview
from kernel import InvalidArgument

from .conftest import Beat

JITTER = {"every": 60, "jitter": "45s"}
STEP_S = 15


def _ticks(beats: list[Beat], minutes: float) -> None:
    """Every Beat ticks every ``STEP_S`` simulated seconds from 12:00:30 to ``minutes`` past 12."""
    at = beats[0].minute(0.5)
    while at <= beats[0].minute(minutes):
        for beat in beats:
            beat.tick(at)
        at += timedelta(seconds=STEP_S)


def _made(beat: Beat, job_id: str = "job") -> list[tuple[str, datetime]]:
    return [(o.trigger_key, o.scheduled_for) for o in beat.occurrences(job_id)]


def test_two_beats_on_one_database_make_each_jittered_firing_once_when_it_comes_due(
    beat: Beat, open_beat: Callable[..., Beat], kernel_url: str
) -> None:
    other = open_beat(kernel_url)
    for job_id in ("a", "b"):
        beat.define(job_id, overlap="allow", schedule=JITTER)
    _ticks([beat, other], 4)

    for job_id in ("a", "b"):
        # Owed: the firings due after the definition (12:00:30) and by the last tick.
        due = {
            beat.key(n): beat.minute(n) + jitter_offset(job_id, beat.key(n), 45) for n in range(5)
        }
        owed = [key for key, at in due.items() if beat.minute(0.5) < at <= beat.minute(4)]
        assert _made(beat, job_id) == [(key, due[key]) for key in owed]
        for occ in beat.occurrences(job_id):
            instant = occ.scheduled_for - jitter_offset(job_id, occ.trigger_key, 45)
            assert instant.second == 0 and occ.scheduled_for - instant < timedelta(seconds=45)
            # Made by whichever Beat ticked first at or after its due time, never before it.
            assert occ.created_at >= occ.scheduled_for
            assert occ.created_at - occ.scheduled_for <= timedelta(seconds=STEP_S)
    offsets = {o.scheduled_for.second for j in ("a", "b") for o in beat.occurrences(j)}
    assert len(offsets) > 1  # spread, not one shared delay


def test_two_beats_on_separate_databases_agree_on_every_jittered_firing(
    open_beat: Callable[..., Beat], tmp_path: Path
) -> None:
    first = open_beat(f"sqlite:///{tmp_path / 'one.db'}")
    second = open_beat(f"sqlite:///{tmp_path / 'two.db'}")
    for beat in (first, second):
        beat.define("spread", overlap="allow", schedule={"cron": "* * * * *", "jitter": "50s"})
    _ticks([first], 5)
    _ticks([second], 5)
    assert _made(first, "spread") == _made(second, "spread")
    assert len(_made(first, "spread")) == 4


def test_preview_shows_the_jittered_due_times_beat_then_uses(sqlite_beat: Beat) -> None:
    beat = sqlite_beat
    beat.define(overlap="allow", schedule=JITTER)
    shown = preview(beat.kernel, "job", 4, beat.minute(0.5))["firings"]
    _ticks([beat], 5)
    made = _made(beat)[:4]
    assert [f["trigger_key"] for f in shown] == [key for key, _ in made]
    assert [f["utc"] for f in shown] == [
        at.isoformat().replace("+00:00", "Z")
        for _, at in made  # type: ignore[attr-defined]
    ]


@pytest.mark.parametrize(
    ("schedule", "words"),
    [
        ({"every": 60, "jitter": 60}, "not smaller than the shortest gap"),
        ({"cron": "*/5 * * * *", "jitter": "10m"}, "(300s)"),
        ({"at": "2026-03-02T13:00:00Z", "jitter": 5}, "recurring"),
    ],
)
def test_a_jitter_not_smaller_than_the_interval_is_refused_and_nothing_written(
    sqlite_beat: Beat, schedule: dict[str, object], words: str
) -> None:
    with pytest.raises(InvalidArgument) as refused:
        sqlite_beat.define(schedule=schedule)
    assert refused.value.field == "schedule.jitter" and words in str(refused.value)
    assert sqlite_beat.kernel.list_jobs() == []
