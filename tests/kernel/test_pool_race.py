"""A pool's limit under real concurrency on PostgreSQL: claimers released together at a
barrier never run more than ``limit``, and the counter never sticks.

Each round: six claimers race for six queued occurrences of a pool of two; then the two
holders end their runs (succeed, retryable failure, warm hand back, or lease expiry
through Beat or a claim) while four claimers race for the slots they free. After every
step ``pools.running`` equals the pool's running occurrences and is at most the limit.
``KERNEL_RACE_ROUNDS`` sets the rounds (default 20 for the suite's time budget; 300 is
the long run). With the guard removed from TAKE_POOL_SLOT the first round fails.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from kernel.store import Kernel
from kernel.testing import ManualClock
from tests.kernel.interleave import Actors, Outcome, refusals_are_kernel_errors

LIMIT = 2
CLAIMERS = 6
LEASE_S = 30


@pytest.fixture
def pool_world(pg_database_url: str) -> Iterator[tuple[Kernel, Actors, ManualClock]]:
    clock = ManualClock()
    kernel = Kernel.open(pg_database_url, migrate_schema=True, clock=clock)
    actors = Actors(pg_database_url, [clock] * CLAIMERS)
    try:
        yield kernel, actors, clock
    finally:
        actors.close()
        kernel.close()


def _counted(kernel: Kernel) -> tuple[int, int]:
    """(the pool's counter, its occurrences running now), read in one snapshot."""
    with kernel.engine.connect() as conn:
        row = conn.execute(
            sa.text(
                "SELECT (SELECT running FROM pools WHERE name = 'db'),"
                " (SELECT count(*) FROM occurrences WHERE pool = 'db' AND status = 'running')"
            )
        ).one()
    return int(row[0]), int(row[1])


def _check(kernel: Kernel, where: str) -> int:
    counter, running = _counted(kernel)
    assert counter == running <= LIMIT, f"{where}: counter {counter}, running {running}"
    return running


def _winners(outcomes: list[Outcome]) -> list[Any]:
    refusals_are_kernel_errors(outcomes)
    return [o.value for o in outcomes if o.ok and o.value is not None]


def test_claimers_at_a_barrier_never_exceed_the_pool_limit(
    pool_world: tuple[Kernel, Actors, ManualClock],
) -> None:
    kernel, actors, clock = pool_world
    kernel.set_pool_limit("db", LIMIT)
    for job in ("a", "b"):
        kernel.define_job(
            {
                "id": job,
                "kind": "callable",
                "payload": {"callable": "jobs.sample:run"},
                "schedule": None,
                "overlap": "allow",
                "lease": f"{LEASE_S}s",
                "max_attempts": 100,
                "retry": {"backoff": "1s", "factor": 1, "max": "1s", "jitter": 0},
                "pool": "db",
            }
        )
    rounds = int(os.environ.get("KERNEL_RACE_ROUNDS", "0")) or 20
    for i in range(rounds):
        occ = [
            kernel.run_now("ab"[n % 2], request_id=f"r{i}-{n}", operator="t").occurrence.id
            for n in range(CLAIMERS)
        ]
        by_id = i % 2 == 0
        first = _winners(
            actors.run(*(_claimer(occ[n] if by_id else None, f"c{n}") for n in range(CLAIMERS)))
        )
        # Claims by id each try their own occurrence, so both slots are taken; claim_next
        # may pass over rows another claimer holds locked (SKIP LOCKED) and find none.
        took = [c.occurrence.id for c in first]
        assert len(first) == LIMIT if by_id else 1 <= len(first) <= LIMIT, f"round {i}: {took}"
        assert _check(kernel, f"round {i} claims") == len(first)

        ends = [_end(claim, (i + n) % 3) for n, claim in enumerate(first)]
        rest = CLAIMERS - len(ends)
        second = actors.run(*ends, *(_claimer(None, f"d{n}") for n in range(rest)))
        refusals_are_kernel_errors(second)
        assert all(o.ok for o in second[: len(ends)]), f"round {i}: {second}"
        _check(kernel, f"round {i} ends vs claims")
        if i % 3 == 0:
            # Leases run out: Beat's expiry and claims race over the expired runs.
            clock.advance(LEASE_S + 1)
            third = actors.run(
                lambda k: k.expire_leases(),
                *(_claimer(None, f"e{n}") for n in range(CLAIMERS - 1)),
            )
            refusals_are_kernel_errors(third)
            _check(kernel, f"round {i} expiry vs claims")
        # Settle everything of this round; the pool must be empty again.
        clock.advance(5)
        _drain(kernel, occ)
        assert _counted(kernel) == (0, 0), f"round {i}: a stuck counter"


def _claimer(occ_id: int | None, owner: str) -> Callable[[Kernel], Any]:
    """A claim of ``occ_id``, or claim_next when None."""
    if occ_id is not None:
        return lambda k: k.claim(occ_id, owner=owner, lease=LEASE_S)
    return lambda k: k.claim_next(owner=owner, lease=LEASE_S)


def _end(claim: Any, how: int) -> Callable[[Kernel], Any]:
    """The holder ends its run: succeeds (0), fails retryably (1) or hands back (2)."""
    held = {"owner": claim.owner, "fence": claim.fence}
    occ_id = claim.occurrence.id
    if how == 0:
        return lambda k: k.succeed(occ_id, **held)
    if how == 1:
        return lambda k: k.fail(occ_id, code="X", message="x", retryable=True, **held)
    return lambda k: k.hand_back(occ_id, safe_point="before_execute", checkpoint=None, **held)


def _drain(kernel: Kernel, occ: list[int]) -> None:
    """Run the round's occurrences to the end, one at a time (a stuck counter blocks this)."""
    for _ in range(10 * len(occ)):
        left = [o for o in occ if kernel.get_occurrence(o).status not in ("succeeded",)]
        if not left:
            return
        for o in left:
            current = kernel.get_occurrence(o)
            live = current.lease_expires_at is not None and current.lease_expires_at > kernel.now()
            if live:
                kernel.succeed(o, owner=current.lease_owner, fence=current.fence)  # type: ignore[arg-type]
                continue
            claim = kernel.claim(o, owner="drain", lease=LEASE_S)  # a reclaim when expired
            if claim is not None:
                kernel.succeed(o, owner="drain", fence=claim.fence)
    raise AssertionError(f"occurrences left unsettled: {left}")
