"""A start deadline (issue 38 item 7) raced: a claim (or ``claim_next``) and Beat's upkeep
meet the same expired occurrence at once. Exactly one settles it skipped ``expired``, with
one event; the other finds it settled or passes it by; nothing runs it. On PostgreSQL
every other round holds the occurrence's row until both have read (:mod:`race_world`);
20 rounds there, 5 on SQLite."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kernel.store import Kernel
from tests.kernel.interleave import LEASE_S, job_spec
from tests.kernel.race_world import World, world, world_factory

#: The race fixtures this module's tests take (imported, so listed as used).
__all__ = ["world", "world_factory"]

ROUNDS = 20

_CLAIMS: dict[str, Callable[[Kernel, int], Any]] = {
    "claim": lambda k, occ: k.claim(occ, owner="w1", lease=LEASE_S),
    "claim_next": lambda k, occ: k.claim_next(owner="w1", lease=LEASE_S),
}


@pytest.mark.parametrize("claimer", sorted(_CLAIMS))
def test_a_claim_and_the_upkeep_settle_an_expired_occurrence_once(
    world: World, claimer: str
) -> None:
    world.stage.kernel.define_job(job_spec("stale", expires="1m"))
    claim = _CLAIMS[claimer]

    def round_(i: int) -> None:
        (occ,) = world.stage.firing("stale")(world.stage.kernel).created
        world.clock.advance(60)
        claimed, swept = world.race(
            i, lambda k: claim(k, occ), lambda k: k.skip_expired(), hold=occ
        )
        where = f"round {i}: {claimer} {claimed}, upkeep {swept}"
        assert claimed.ok and claimed.value is None, where  # never started late
        assert swept.ok and swept.value in (0, 1), where
        # Both skip a row another transaction holds (PostgreSQL's SKIP LOCKED): while the
        # round holds it, claim_next and the upkeep may both pass it by; Beat's next tick
        # settles it then. Otherwise one of the two racers did.
        later = world.stage.kernel.skip_expired()
        held = world.postgres and i % 2 == 0
        assert later == 0 or (held and claimer == "claim_next" and swept.value == 0), where
        assert world.check_job("stale", since=occ)[occ] == "skipped", where
        skips = [d for t, d in world.state(occ)["events"] if t == "occurrence_skipped"]
        assert len(skips) == 1, where
        assert "occurrence_claimed" not in [t for t, _ in world.state(occ)["events"]], where
        occurrence = world.stage.kernel.get_occurrence(occ)
        assert occurrence.skip_reason == "expired" and occurrence.attempt == 0, where

    world.repeat(round_, rounds=ROUNDS)
