"""A batch's settle of run N and claim of run N+1, raced by another worker and an operator.

``Kernel.succeed_and_claim`` commits the success of one occurrence and the claim of the
next in one transaction (issue 22). Released together with another worker claiming the
next occurrence, or an operator cancelling it, exactly one of them has it; the success of
the first lands whichever way the claim goes.
"""

from __future__ import annotations

import pytest

from kernel.store import Kernel
from kernel.types import Claim
from tests.kernel.race_world import World, world, world_factory

__all__ = ["world", "world_factory"]  # fixtures

pytestmark = pytest.mark.timeout(240)


def test_the_next_claim_of_a_batch_races_a_claim_elsewhere_and_a_cancel(world: World) -> None:
    stage = world.stage

    def round_(i: int) -> None:
        current = stage.running(owner="batch")
        (following,) = stage.fresh()
        cancelling = i % 4 >= 2

        def other(k: Kernel) -> object:
            if cancelling:
                return k.cancel(following, request_id=f"cancel-{i}", operator="ops")
            return k.claim(following, owner="elsewhere")

        batch, rival = world.race(
            i,
            lambda k: k.succeed_and_claim(
                current.occurrence.id,
                owner="batch",
                fence=current.fence,
                next_occurrence_id=following,
            ),
            other,
            hold=following,
        )
        assert batch.ok and rival.ok, (i, batch, rival)
        assert world.status(current.occurrence.id) == "succeeded", i
        checked = world.state(following)
        state = checked["occurrence"]
        claimed = [t for t, _ in checked["events"] if t == "occurrence_claimed"]
        if cancelling:
            # A cancel that came first leaves nothing to claim; one that came second is a
            # request to the holder the batch's claim made.
            if isinstance(batch.value, Claim):
                assert state["status"] == "running" and state["cancel_requested"], (i, state)
                assert len(claimed) == 1, (i, claimed)
            else:
                assert state["status"] == "cancelled" and not claimed, (i, state)
            return
        winners = [o.value for o in (batch, rival) if isinstance(o.value, Claim)]
        assert len(winners) == 1, (i, batch, rival)
        assert state["status"] == "running" and state["lease_owner"] == winners[0].owner, i
        assert state["fence"] == 1 and len(claimed) == 1, (i, state, claimed)

    world.repeat(round_, rounds=40)
