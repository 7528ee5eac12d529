"""Beat hints again a failure notification whose hint was lost (once it is a minute overdue)."""

from __future__ import annotations

from datetime import timedelta

from beat.conftest import Beat

from celery_app.task_names import NOTIFY


def _hinted(beat: Beat, queue: str) -> list[list[int]]:
    """The args of every ``kernel.notify`` message waiting on ``queue`` (taken off it)."""
    found = []
    with beat.scheduler.app.connection_for_read() as conn, conn.SimpleQueue(queue) as inbox:
        while inbox.qsize():
            message = inbox.get(timeout=1)
            if message.headers["task"] == NOTIFY:
                found.append(message.payload[0])
            message.ack()
    return found


def test_a_lost_notification_hint_is_sent_again_by_beat(sqlite_beat: Beat) -> None:
    beat = sqlite_beat
    beat.define("failing", schedule=None, queue="alerts", notify={"task": "hooks.failed"})
    kernel = beat.kernel
    occ = kernel.run_now("failing", request_id="r", operator="t", force=True).occurrence.id
    claim = kernel.claim(occ, owner="w", lease=60)
    assert claim is not None
    kernel.fail(occ, owner="w", fence=claim.fence, code="X", message="x", retryable=False)
    # The settle recorded its notification; the settling worker's hint is lost.
    [made] = [n.id for n in kernel.run_notifications(occ, claim.fence)]
    beat.tick(beat.clock.now + timedelta(seconds=30))
    assert _hinted(beat, "alerts") == []  # not overdue yet: its own hint may be on its way
    beat.scheduler._next_notify = 0.0  # the minute between passes, elapsed
    beat.tick(beat.clock.now + timedelta(seconds=61))
    assert _hinted(beat, "alerts") == [[made]]
