"""Resource pools (SPEC §6, issue 13 item 8) and the disabled-job claim rule (issue 8 item 6).

A pool's limit is the data's: a claim takes a slot of ``pools.running`` only while it is
below ``limit``, and every way a run ends gives the slot back.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from kernel import InvalidArgument, Pool, StateConflict
from tests.kernel.conftest import Harness
from tests.kernel.interleave import Actors

SAFE = "before_execute"


def _pool(k: Harness, name: str) -> Pool:
    return {p.name: p for p in k.kernel.pools()}[name]


def test_set_limit_admits_that_many_and_lists_counts(k: Harness) -> None:
    pool, changed = k.kernel.set_pool_limit("db", 2)
    assert (pool, changed) == (Pool("db", 2, 0, 0), True)
    assert k.kernel.set_pool_limit("db", 2) == (pool, False)
    occ = k.occurrences("a", 3, pool="db")
    assert [k.kernel.claim(o, owner="w", lease=30) is not None for o in occ] == [True, True, False]
    assert _pool(k, "db") == Pool("db", 2, 2, 1)
    # Lowering the limit stops nothing; claims wait until enough runs end.
    k.kernel.set_pool_limit("db", 1)
    k.kernel.succeed(occ[0], owner="w", fence=1)
    assert k.kernel.claim(occ[2], owner="w", lease=30) is None
    k.kernel.succeed(occ[1], owner="w", fence=1)
    assert k.kernel.claim(occ[2], owner="w", lease=30) is not None
    assert _pool(k, "db") == Pool("db", 1, 1, 0)
    with pytest.raises(InvalidArgument) as bad:
        k.kernel.set_pool_limit("db", 0)
    assert bad.value.field == "limit"


def test_an_undefined_pool_has_limit_one_and_appears_once_used(k: Harness) -> None:
    first, second = k.occurrences("a", 2, pool="gpu")
    assert k.kernel.pools() == [Pool("gpu", 1, 0, 2, defined=False)]
    assert k.kernel.claim(first, owner="w", lease=30) is not None
    assert k.kernel.claim(second, owner="w", lease=30) is None
    assert k.kernel.pools() == [Pool("gpu", 1, 1, 1)]


def test_every_end_of_a_run_gives_its_slot_back(k: Harness) -> None:
    """succeed, fail (retry and dead letter), cancel at settle, release (pause ack and
    warm hand back), lease expiry (Beat's and a claim's): the counter is back to 0 each time."""
    k.kernel.set_pool_limit("db", 1)
    k.define("a", pool="db", max_attempts=2)
    k.define("once", pool="db", max_attempts=1, delivery="at-most-once")

    def run(job: str = "a") -> tuple[int, int]:
        [occ] = k.occurrences(job, 1)
        claim = k.kernel.claim(occ, owner="w", lease=30)
        assert claim is not None and _pool(k, "db").running == 1
        return occ, claim.fence

    def free() -> None:
        assert _pool(k, "db").running == 0

    occ, fence = run()
    k.kernel.succeed(occ, owner="w", fence=fence)
    free()
    occ, fence = run()
    k.kernel.fail(occ, owner="w", fence=fence, code="X", message="x", retryable=True)
    free()
    k.clock.advance(7200)
    again = k.kernel.claim(occ, owner="w", lease=30)
    assert again is not None
    k.kernel.fail(occ, owner="w", fence=again.fence, code="X", message="x", retryable=True)
    assert k.kernel.get_occurrence(occ).status == "dead_letter"
    free()
    occ, fence = run()
    k.kernel.cancel(occ, request_id="c1", operator="t")
    k.kernel.fail(occ, owner="w", fence=fence, code="X", message="x", retryable=True)
    assert k.kernel.get_occurrence(occ).status == "cancelled"
    free()
    occ, fence = run()
    k.kernel.hand_back(occ, owner="w", fence=fence, safe_point="before_execute", checkpoint=None)
    free()
    claim = k.kernel.claim(occ, owner="w", lease=30)
    assert claim is not None
    k.kernel.request_pause(
        occ,
        expected_fence=claim.fence,
        request_id="p",
        safe_points=["before_execute"],
        operator="t",
    )
    k.kernel.ack_pause(
        occ,
        owner="w",
        fence=claim.fence,
        request_id="p",
        expected_revision=None,
        safe_point=SAFE,
        checkpoint={"n": 1},
    )
    free()
    k.kernel.cancel(occ, request_id="c2", operator="t")
    # Lease expiry: Beat's (at-most-once -> needs_adjudication), and a claim's own.
    occ, fence = run("once")
    k.clock.advance(31)
    assert k.kernel.expire_leases() == {"cancelled": 0, "needs_adjudication": 1, "dead_letter": 0}
    free()
    # Decided, so that it does not hold back the job's next run.
    k.kernel.adjudicate(occ, decision="abandon", request_id="a1", operator="t")
    occ, fence = run("once")
    k.clock.advance(31)
    assert k.kernel.claim(occ, owner="w2", lease=30) is None
    assert k.kernel.get_occurrence(occ).status == "needs_adjudication"
    free()
    # A reclaim of an expired at-least-once run keeps the slot it had: still one.
    occ, fence = run()
    k.clock.advance(31)
    reclaim = k.kernel.claim(occ, owner="w2", lease=30)
    assert reclaim is not None and _pool(k, "db").running == 1
    k.kernel.succeed(occ, owner="w2", fence=reclaim.fence)
    free()


def test_the_pump_and_claim_next_skip_a_full_pool(k: Harness) -> None:
    k.kernel.set_pool_limit("db", 1)
    first, waiting = k.occurrences("a", 2, pool="db")
    [free_one] = k.occurrences("b", 1)
    assert {h.occurrence_id for h in k.kernel.dispatch_batch()} == {first, waiting, free_one}
    k.clock.advance(300)
    assert k.kernel.claim(first, owner="w", lease=600) is not None
    assert {h.occurrence_id for h in k.kernel.dispatch_batch()} == {free_one}
    got = k.kernel.claim_next(owner="w", lease=30, kinds=["callable"])
    assert got is not None and got.occurrence.id == free_one
    assert k.kernel.claim_next(owner="w", lease=30, kinds=["callable"]) is None
    k.kernel.succeed(first, owner="w", fence=1)
    assert [h.occurrence_id for h in k.kernel.dispatch_batch()] == [waiting]


def test_a_disabled_jobs_occurrences_wait_but_a_run_now_runs(k: Harness) -> None:
    [scheduled] = k.occurrences("a", 1)
    k.kernel.set_job_enabled("a", False)
    manual = k.kernel.run_now("a", request_id="r1", operator="t").occurrence.id
    assert k.kernel.claim(scheduled, owner="w", lease=30) is None
    assert [h.occurrence_id for h in k.kernel.dispatch_batch()] == [manual]
    got = k.kernel.claim_next(owner="w", lease=30, kinds=["callable"])
    assert got is not None and got.occurrence.id == manual
    assert k.kernel.claim_next(owner="w", lease=30, kinds=["callable"]) is None
    # Its retries are a run-now's too.
    k.kernel.fail(manual, owner="w", fence=1, code="X", message="x", retryable=True)
    k.clock.advance(3600)
    assert k.kernel.claim(manual, owner="w", lease=30) is not None
    # A reclaim after expiry is a claim: refused while disabled, taken once enabled.
    k.kernel.set_job_enabled("a", True)
    running = k.kernel.claim(scheduled, owner="w", lease=30)
    assert running is not None
    k.kernel.set_job_enabled("a", False)
    k.clock.advance(31)
    assert k.kernel.claim(scheduled, owner="w2", lease=30) is None
    assert k.kernel.get_occurrence(scheduled).status == "running"
    k.kernel.set_job_enabled("a", True)
    assert k.kernel.claim(scheduled, owner="w2", lease=30) is not None


def test_a_constraint_refusal_says_what_the_constraint_stands_for(k: Harness) -> None:
    k.kernel.set_pool_limit("db", 1)

    def write(tx: Any) -> None:
        tx.conn.execute(sa.text("UPDATE pools SET running = -1"))

    with pytest.raises(StateConflict) as refused:
        k.kernel._session.run(write)
    assert refused.value.details["constraint"] == "ck_pools_counters"
    assert "a pool's running count cannot go below 0 and its limit is at least 1" in str(
        refused.value
    )


def _set_counter(k: Harness, name: str, running: int) -> None:
    """As a give-back that never happened (or one too many) would leave it."""
    with k.kernel.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE pools SET running = :n WHERE name = :name"),
            {"n": running, "name": name},
        )


def test_a_drifted_counter_is_reconciled_from_the_runs_that_hold_a_slot(k: Harness) -> None:
    k.kernel.set_pool_limit("db", 3)
    k.kernel.set_pool_limit("idle", 3)
    held, waiting = k.occurrences("a", 2, pool="db")
    assert k.kernel.claim(held, owner="w", lease=30) is not None
    _set_counter(k, "db", 2)  # a slot never given back: one run holds it, the counter says 2
    _set_counter(k, "idle", 1)
    assert k.kernel.claim(waiting, owner="w", lease=30) is not None  # room for one more only
    assert k.kernel.claim(k.occurrences("a")[0], owner="w", lease=30) is None
    k.kernel.succeed(waiting, owner="w", fence=1)
    assert _pool(k, "db").running == 2  # wrong: only `held` runs

    before = k.kernel.last_event_id()
    corrected = k.kernel.reconcile_pools()
    assert corrected == [
        {"pool": "db", "was": 2, "running": 1},
        {"pool": "idle", "was": 1, "running": 0},
    ]
    events = [(e.type, e.data) for e in k.kernel.events(after_id=before)]
    assert events == [
        ("pool_reconciled", {"pool": "db", "was": 2, "running": 1}),
        ("pool_reconciled", {"pool": "idle", "was": 1, "running": 0}),
    ]
    assert _pool(k, "db").running == 1
    # Nothing drifted since: no write, no event.
    after = k.kernel.last_event_id()
    assert k.kernel.reconcile_pools() == []
    assert k.kernel.last_event_id() == after


def test_reconciling_while_runs_take_and_give_back_slots_keeps_the_count_true(
    k: Harness,
) -> None:
    """Reconcile released together with a claim and a settle of the same pool, round after
    round: it either corrects the counter to the runs that hold a slot, or (a claim or a
    settle changed the counter under it) leaves it for the next pass; it never writes a
    count that a concurrent claim or give-back then makes wrong."""
    k.kernel.set_pool_limit("db", 100)
    k.define("a", pool="db")
    actors = Actors(k.url, [k.clock] * 3)
    try:
        for _ in range(8):
            ending, starting = k.occurrences("a", 2)
            fence = k.kernel.claim(ending, owner="w", lease=30).fence  # type: ignore[union-attr]
            _set_counter(k, "db", _pool(k, "db").running + 1)  # a give-back lost
            outcomes = actors.run(
                lambda kernel, o=ending, f=fence: kernel.succeed(o, owner="w", fence=f),
                lambda kernel, o=starting: kernel.claim(o, owner="w", lease=30),
                lambda kernel: kernel.reconcile_pools(),
            )
            assert all(o.crash is None and o.refusal is None for o in outcomes), outcomes
            running = len(k.kernel.list_occurrences(job_id="a", statuses=["running"], limit=100))
            drift = 0 if outcomes[2].value else 1
            assert _pool(k, "db").running == running + drift
            k.kernel.reconcile_pools()
            assert _pool(k, "db").running == running
    finally:
        actors.close()
