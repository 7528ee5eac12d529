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
