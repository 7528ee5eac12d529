"""Overlap policies when a job outlives its interval (SPEC §6), on SQLite and PostgreSQL.

The job fires every minute. Its 12:01 occurrence is claimed by a worker that holds it
for an hour (a lease long enough not to expire), and Beat ticks on through the next
minutes while that run is still active.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernel import Claim

if TYPE_CHECKING:
    from tests.beat.conftest import Beat

LONG_LEASE = 3600.0


def _long_run(beat: Beat, **fields: object) -> Claim:
    """Define the job, fire 12:01 and claim it for an hour."""
    beat.define(**fields)
    beat.tick()
    beat.tick(beat.minute(1))
    [first] = beat.occurrences()
    claim = beat.kernel.claim(first.id, owner="slow", lease=LONG_LEASE)
    assert claim is not None
    return claim


def _claim(beat: Beat, trigger_minute: int, owner: str) -> Claim | None:
    [occ] = [o for o in beat.occurrences() if o.trigger_key == beat.key(trigger_minute)]
    return beat.kernel.claim(occ.id, owner=owner, lease=LONG_LEASE)


def test_skip_records_each_overlapping_firing_and_resumes_when_the_run_ends(beat: Beat) -> None:
    running = _long_run(beat)  # overlap: skip is the default
    for n in (2, 3):
        beat.tick(beat.minute(n))
    assert beat.skips() == {beat.key(2): "overlap", beat.key(3): "overlap"}
    assert beat.keys(status="queued") == []
    skipped = beat.kernel.events(job_id="job", limit=100)
    assert [e.data["reason"] for e in skipped if e.type == "occurrence_skipped"] == ["overlap"] * 2

    beat.kernel.succeed(running.occurrence.id, owner="slow", fence=running.fence)
    beat.tick(beat.minute(4))
    assert beat.keys(status="queued") == [beat.key(4)]


def test_allow_runs_the_next_firing_beside_the_active_one(beat: Beat) -> None:
    _long_run(beat, overlap="allow")
    beat.tick(beat.minute(2))
    assert beat.skips() == {}
    assert _claim(beat, 2, "w2") is not None
    assert [o.status for o in beat.occurrences()] == ["running", "running"]


def test_queue_waits_behind_the_active_run_up_to_max_queued(beat: Beat) -> None:
    running = _long_run(beat, overlap="queue", max_queued=2)
    for n in (2, 3, 4, 5):
        beat.tick(beat.minute(n))
    assert beat.keys(status="queued") == [beat.key(2), beat.key(3)]
    assert beat.skips() == {beat.key(4): "queue_full", beat.key(5): "queue_full"}
    # Queued firings wait: none may start while 12:01 runs.
    assert _claim(beat, 2, "w2") is None

    beat.kernel.succeed(running.occurrence.id, owner="slow", fence=running.fence)
    second = _claim(beat, 2, "w2")
    assert second is not None
    assert _claim(beat, 3, "w3") is None
    # One run and one waiting: the next firing finds room in the queue again.
    beat.tick(beat.minute(6))
    assert beat.keys(status="queued") == [beat.key(3), beat.key(6)]


def test_queue_counts_only_the_firings_waiting_behind_the_first(beat: Beat) -> None:
    """With nothing running yet, the oldest queued firing is the one that goes first,
    not one waiting behind it: ``max_queued: 1`` still lets one more queue up."""
    beat.define(overlap="queue", max_queued=1)
    beat.tick()
    for n in (1, 2, 3):
        beat.tick(beat.minute(n))
    assert beat.keys(status="queued") == [beat.key(1), beat.key(2)]
    assert beat.skips() == {beat.key(3): "queue_full"}


def test_replace_cancels_the_active_run_and_starts_the_new_one_after_it(beat: Beat) -> None:
    running = _long_run(beat, overlap="replace")
    beat.tick(beat.minute(2))

    old = beat.kernel.get_occurrence(running.occurrence.id)
    assert old.status == "running" and old.cancel_requested
    answer = beat.kernel.renew(old.id, owner="slow", fence=running.fence, lease=LONG_LEASE)
    assert answer.cancel_requested
    assert beat.keys(status="queued") == [beat.key(2)]
    # The replacement is gated until the old run has ended ...
    assert _claim(beat, 2, "w2") is None
    beat.kernel.cancelled(old.id, owner="slow", fence=running.fence)
    # ... and then runs.
    replacement = _claim(beat, 2, "w2")
    assert replacement is not None
    assert beat.kernel.get_occurrence(old.id).status == "cancelled"


def test_replace_keeps_only_the_newest_waiting_firing(beat: Beat) -> None:
    running = _long_run(beat, overlap="replace")
    beat.tick(beat.minute(2))
    beat.tick(beat.minute(3))  # the old run still has not stopped

    statuses = {o.trigger_key: o.status for o in beat.occurrences()}
    assert statuses == {beat.key(1): "running", beat.key(2): "cancelled", beat.key(3): "queued"}
    beat.kernel.cancelled(running.occurrence.id, owner="slow", fence=running.fence)
    assert _claim(beat, 3, "w3") is not None
