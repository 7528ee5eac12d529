"""Broker messages are only hints: duplicates run nothing twice, lost ones are published again."""

from __future__ import annotations

import pytest
import redis
from integration.stack import Stack


def test_duplicate_hints_run_the_occurrence_once(stack: Stack) -> None:
    # No Beat: the test publishes every hint itself, so it knows exactly how many there are.
    worker = stack.start_worker("worker", concurrency=2)
    stack.define(stack.job("manual", "record", kwargs={"sleep": 1}, lease="5s"))
    occ_id = stack.run_now("manual")
    dropped = f"occurrence {occ_id} not claimable; hint dropped"

    stack.send_hints(occ_id, copies=2)  # both pool processes race for the claim
    stack.wait(lambda: stack.occurrence(occ_id).status.value == "succeeded", timeout=20, what="run")
    stack.send_hints(occ_id, copies=1)  # a late duplicate, after the settle
    stack.wait(lambda: worker.log().count(dropped) == 2, timeout=20, what="two dropped hints")

    assert [run["fence"] for run in stack.ledger(occurrence_id=occ_id)] == [1]
    events = [t for t, _ in stack.event_types(occ_id)]
    assert events.count("occurrence_claimed") == 1
    assert events.count("occurrence_succeeded") == 1


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_purged_queue_is_refilled_by_the_dispatch_pump(stack: Stack, redis_url: str) -> None:
    stack.use_jobs(stack.job("manual", "record", lease="5s"))
    stack.start_beat("beat")  # and no worker yet: the hints wait in the queue
    ids = [stack.run_now("manual") for _ in range(3)]
    client = redis.Redis.from_url(redis_url)
    try:
        stack.wait(lambda: client.llen(stack.queue) >= 3, timeout=10, what="three hints queued")
        assert client.delete(stack.queue) == 1
        stack.wait(lambda: client.llen(stack.queue) >= 3, timeout=10, what="hints published again")
    finally:
        client.close()

    stack.start_worker("worker", concurrency=2)
    stack.wait(lambda: stack.settled("manual"), timeout=20, what="every occurrence settled")
    for occ_id in ids:
        assert stack.occurrence(occ_id).status.value == "succeeded"
        assert [run["fence"] for run in stack.ledger(occurrence_id=occ_id)] == [1]


def test_a_hint_before_its_runs_time_is_sent_again_for_that_time(stack: Stack) -> None:
    """A hint that arrives before its run may start (a worker's clock ahead of the
    database's, a retry's backoff) is not dropped: it is sent again for that time, and
    the run happens then, with no Beat to hint it."""
    worker = stack.start_worker("worker")
    backoff = {"backoff": 3.0, "factor": 1.0, "max": 3.0, "jitter": 0.0}
    stack.define(stack.job("held", "record", lease="5s", max_attempts=2, retry=backoff))
    occ_id = stack.run_now("held")
    claim = stack.kernel.claim(occ_id, owner="test", lease=30)
    assert claim is not None
    stack.kernel.fail(occ_id, owner="test", fence=claim.fence, code="E", message="again",
                      retryable=True)  # fmt: skip
    due = stack.occurrence(occ_id).available_at

    stack.send_hints(occ_id)  # now, seconds before the retry's time
    stack.wait(lambda: stack.occurrence(occ_id).status.value == "succeeded", timeout=30,
               what="the run at its time")  # fmt: skip
    assert f"occurrence {occ_id}: not before" in worker.log()
    [run] = stack.ledger(occurrence_id=occ_id)
    assert (run["fence"], run["attempt"]) == (2, 2), run
    settled = stack.occurrence(occ_id).settled_at
    assert settled is not None and settled >= due
