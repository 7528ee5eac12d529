"""Catch-up after Beat downtime, through whole Beat ticks (SPEC §6), on SQLite and PostgreSQL.

Every test's job fires every minute. Beat ticks at 12:01 (on time), then is down
until 12:08:30: the seven firings 12:02 ... 12:08 were missed, all of them later than
the 15 s grace. Each one must end up either created or recorded as skipped with the
policy's reason, and the cursor must stand at 12:09.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from celery_app.operations import why_answer
from kernel import EventType

if TYPE_CHECKING:
    from tests.beat.conftest import Beat

MISSED = list(range(2, 9))  # minutes after noon: 12:02 ... 12:08


def _down_seven_minutes(beat: Beat, **fields: object) -> None:
    beat.define(**fields)
    beat.tick()  # 12:00:30: plans the cursor at 12:01
    beat.tick(beat.minute(1))
    assert beat.keys() == [beat.key(1)]
    beat.tick(beat.minute(8.5))


@pytest.mark.parametrize(
    ("policy", "fired", "reason"),
    [
        ("none", [], "catchup_none"),
        ("latest", [8], "catchup_latest"),
        ("all", MISSED, None),
    ],
)
def test_seven_missed_minutes_give_0_1_or_7_occurrences_by_policy(
    beat: Beat, policy: str, fired: list[int], reason: str | None
) -> None:
    # A window applies only to policy all (elsewhere it is refused).
    window = {"window": "10m"} if policy == "all" else {}
    _down_seven_minutes(beat, overlap="allow", catchup={"policy": policy, **window})

    assert beat.keys(status="queued") == [beat.key(1)] + [beat.key(n) for n in fired]
    expected_skips = {beat.key(n): reason for n in MISSED if n not in fired}
    assert beat.skips() == expected_skips
    # Every missed firing has exactly one durable record, created or skipped.
    assert sorted(beat.keys()) == sorted(beat.key(n) for n in [1, *MISSED])
    job = beat.kernel.get_job("job")
    assert (job.next_trigger_key, job.next_fire_at) == (beat.key(9), beat.minute(9))

    # The next tick owes nothing more; the one after fires 12:09 on time.
    beat.tick(beat.minute(8.75))
    beat.tick(beat.minute(9))
    assert beat.keys()[-1] == beat.key(9) and len(beat.keys()) == 9


def test_all_fires_only_within_the_window_and_records_the_rest(beat: Beat) -> None:
    _down_seven_minutes(beat, overlap="allow", catchup={"policy": "all", "window": "3m"})

    # 12:08:30 - 3 min = 12:05:30: 12:06, 12:07 and 12:08 are inside the window.
    assert beat.keys(status="queued") == [beat.key(n) for n in (1, 6, 7, 8)]
    assert beat.skips() == {beat.key(n): "outside_catchup_window" for n in (2, 3, 4, 5)}


def test_catching_up_under_overlap_skip_records_each_overlapping_firing(beat: Beat) -> None:
    """Caught-up firings still meet the overlap policy: with ``skip`` (the default) the
    first one runs and the others, overlapping it, are recorded as ``overlap``."""
    beat.define(catchup={"policy": "all"})
    beat.tick()
    beat.tick(beat.minute(1))
    [first] = beat.occurrences()
    claim = beat.kernel.claim(first.id, owner="w1", lease=60)
    assert claim is not None
    beat.kernel.succeed(first.id, owner="w1", fence=claim.fence)
    beat.tick(beat.minute(8.5))

    assert beat.keys(status="queued") == [beat.key(2)]
    assert beat.skips() == {beat.key(n): "overlap" for n in range(3, 9)}


def test_a_missed_cron_firing_in_a_time_zone_is_caught_up_once(beat: Beat) -> None:
    # 13:00 in Berlin (UTC+1 in March before the switch) is 12:00 UTC.
    beat.define(schedule={"cron": "0 * * * *", "timezone": "Europe/Berlin"})
    beat.tick()  # 12:00:30 UTC: the first firing is 13:00 UTC
    beat.tick(beat.minute(60 * 5 + 20))  # down until 17:20 UTC

    cron_key = "cron:2026-03-02T{:02d}:00:00Z"
    assert beat.keys(status="queued") == [cron_key.format(17)]
    assert beat.skips() == {cron_key.format(h): "catchup_latest" for h in (13, 14, 15, 16)}
    assert beat.kernel.get_job("job").next_trigger_key == cron_key.format(18)


def test_latest_after_a_short_downtime_runs_the_most_recent_firing_only(beat: Beat) -> None:
    """Reproduction: an every-5 s job, Beat down ~20 s. The firings within the 15 s grace
    used to fire too (the oldest ran; under ``overlap: skip`` the later ones were then
    skipped as ``overlap`` behind it), so "latest" ran neither the latest nor one."""
    beat.define(schedule={"every": 5}, overlap="allow")
    at = [beat.minute(0.5) + timedelta(seconds=5 * n) for n in range(8)]  # 12:00:30, :35 ...
    beat.tick(at[0])
    beat.tick(at[1])
    before = beat.keys()
    assert before[-1] == _every(at[1])
    beat.tick(at[5] + timedelta(seconds=2))  # down until 12:00:57

    # 12:00:40 ... 12:00:55 were due: only 12:00:55 runs, the others are catch-up skips.
    assert beat.keys(status="queued") == [*before, _every(at[5])]
    assert beat.skips() == {_every(t): "catchup_latest" for t in at[2:5]}
    # The next on-time tick fires its one firing as usual.
    beat.tick(at[6])
    assert beat.keys()[-1] == _every(at[6]) and not beat.skips().get(_every(at[6]))


def _every(at: datetime) -> str:
    return f"every:{at.strftime('%Y-%m-%dT%H:%M:%S')}Z"


def test_every_missed_firing_is_counted_past_the_ones_recorded(beat: Beat) -> None:
    beat.define(catchup={"policy": "none"})
    beat.tick()
    beat.tick(beat.minute(1))
    beat.tick(beat.minute(2001.5))  # down for 12:02 ... 2001 minutes later: 2,000 missed

    skipped = beat.kernel.list_occurrences(job_id="job", statuses=["skipped"], limit=1000)
    assert len(skipped) == 1000 and skipped[-1].trigger_key == beat.key(2)  # the oldest
    newest = beat.kernel.events(job_id="job", before_id=beat.kernel.last_event_id() + 1, limit=5)
    (missed,) = [e.data for e in newest if e.type == EventType.FIRINGS_MISSED]
    assert missed == {
        "count": 2000,
        "recorded": 1000,
        "reason": "catchup_none",
        "first_at": beat.minute(2).isoformat(),
        "until_at": beat.minute(2002).isoformat(),
    }
    # A firing only counted is explained as missed, with how many were.
    explained = why_answer(beat.kernel, "job", beat.minute(1500))
    assert explained["outcome"] == "skipped"
    assert "one of 2000 firings missed (catchup_none)" in explained["reason"]
