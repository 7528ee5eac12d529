"""On PostgreSQL the worker's claim and settle read the server's clock inside their statements."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
import sqlalchemy as sa

from kernel.db.clock import DatabaseClock
from kernel.store import Kernel


class CountingClock(DatabaseClock):
    """The server clock, counting the round trips spent reading it on its own."""

    def __init__(self) -> None:
        self.reads = 0

    def now_ms(self, conn: sa.Connection) -> int:
        self.reads += 1
        return super().now_ms(conn)


@pytest.fixture
def clock() -> CountingClock:
    return CountingClock()


@pytest.fixture
def kernel(pg_database_url: str, clock: CountingClock) -> Iterator[Kernel]:
    opened = Kernel.open(pg_database_url, migrate_schema=True, clock=clock)
    try:
        yield opened
    finally:
        opened.close()


def _queued(kernel: Kernel, n: int) -> list[int]:
    kernel.define_job(
        {
            "id": "job",
            "kind": "callable",
            "payload": {"callable": "jobs.sample:run"},
            "overlap": "allow",
            "retry": {"backoff": "10s", "factor": 2, "max": "1h", "jitter": 0},
        }
    )
    job = kernel.get_job("job")
    start = kernel.now() - timedelta(minutes=n)
    firings = [(f"t{i}", start + timedelta(minutes=i)) for i in range(n)]
    report = kernel.fire(
        "job",
        expected_revision=job.revision,
        expected_cursor=None,
        firings=firings,
        next_cursor=("t-next", start + timedelta(minutes=n)),
    )
    return list(report.created)


def test_claim_and_settle_take_the_server_clock_without_a_round_trip_of_their_own(
    kernel: Kernel, clock: CountingClock
) -> None:
    done, retried = _queued(kernel, 2)
    before = kernel.now()
    clock.reads = 0
    claim = kernel.claim(done, owner="w1", lease=30)
    assert claim is not None
    kernel.succeed(done, owner="w1", fence=claim.fence, result={"ok": True})
    second = kernel.claim(retried, owner="w1", lease=30)
    assert second is not None
    kernel.fail(retried, owner="w1", fence=second.fence, code="BOOM", message="x", retryable=True)
    assert clock.reads == 0
    after = kernel.now()

    # The lease runs from the claim's instant, which its event records.
    claimed = next(e for e in kernel.events(occurrence_id=done) if e.type == "occurrence_claimed")
    assert before <= claimed.at <= after
    assert claim.lease_expires_at == claimed.at + timedelta(seconds=30)
    occurrence = kernel.get_occurrence(done)
    settled = [e for e in kernel.events(occurrence_id=done) if e.type == "occurrence_succeeded"]
    assert [e.at for e in settled] == [occurrence.settled_at]
    assert occurrence.updated_at == occurrence.settled_at and occurrence.available_at == (
        occurrence.settled_at
    )

    # A retry waits its backoff from the settle's instant; the event says when.
    waiting = kernel.get_occurrence(retried)
    events = kernel.events(occurrence_id=retried)
    failed = next(e for e in events if e.type == "occurrence_retry_wait")
    assert waiting.status == "retry_wait" and waiting.settled_at is None
    assert waiting.available_at == failed.at + timedelta(seconds=10)
    assert failed.data["retry_at"] == int(waiting.available_at.timestamp() * 1000)
