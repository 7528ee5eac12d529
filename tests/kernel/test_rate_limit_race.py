"""A rate limit under real concurrency on PostgreSQL: claimers released together at a
barrier, each for a run of the same rate-limited task, and exactly one of them runs.

Each round six claimers race (by id for their own occurrence, or claim_next) for one
token of a limit of 1/s; the first round also races over the limit's first row. Then the
clock moves one interval on and the next round races again. ``KERNEL_RACE_ROUNDS`` sets
the rounds (default 20). With the guard removed from TAKE_RATE_TOKEN every claimer runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa

from kernel.store import Kernel
from kernel.testing import ManualClock
from kernel.types import Claim
from tests.kernel.interleave import Actors, race_rounds, refusals_are_kernel_errors

CLAIMERS = 6


@pytest.fixture
def rate_world(pg_database_url: str) -> Iterator[tuple[Kernel, Actors, ManualClock]]:
    clock = ManualClock()
    kernel = Kernel.open(pg_database_url, migrate_schema=True, clock=clock)
    actors = Actors(pg_database_url, [clock] * CLAIMERS)
    try:
        yield kernel, actors, clock
    finally:
        actors.close()
        kernel.close()


def _claimer(occurrence_id: int | None, owner: str) -> Callable[[Kernel], Claim | None]:
    if occurrence_id is None:
        return lambda k: k.claim_next(owner=owner, lease=60)
    return lambda k: k.claim(occurrence_id, owner=owner, lease=60)


def test_claimers_at_a_barrier_take_one_token(
    rate_world: tuple[Kernel, Actors, ManualClock],
) -> None:
    kernel, actors, clock = rate_world
    settings = {"rate_limit": "1/s", "lease": "60s"}
    for i in range(race_rounds(postgres=True, rounds=20)):
        made = [kernel.enqueue(task="proj.send", settings=settings) for _ in range(CLAIMERS)]
        by_id = i % 2 == 0
        ops = [
            _claimer(made[n].occurrence_id if by_id or n % 2 else None, f"c{i}-{n}")
            for n in range(CLAIMERS)
        ]
        outcomes = actors.run(*ops)
        refusals_are_kernel_errors(outcomes)
        won = [o.value.occurrence.id for o in outcomes if o.value is not None]
        assert len(won) == 1, f"round {i}: {won} ran under one token"
        with kernel.engine.connect() as conn:
            free_at = conn.execute(sa.text("SELECT next_free_at FROM rate_limits")).scalar_one()
        claimed = kernel.get_occurrence(won[0]).lease_expires_at
        assert claimed is not None
        assert free_at == int(claimed.timestamp() * 1000) - 60_000 + 1000, f"round {i}"
        clock.advance(1)
