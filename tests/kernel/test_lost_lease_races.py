"""A lost lease reclaimed while others act on it at the same instant (issues 38 and 39).

A reclaim spends no attempt and counts one lost lease; the checkpoint a renewal stores rides
on the lease it renews. Two reclaimers, a reclaim against Beat's expiry, and the holder's last
renewal against a reclaim must each end as some serial order would: one holder, one count,
and the checkpoint a reclaim hands over is the newest one a renewal that was accepted stored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kernel.store import Kernel
from tests.kernel.interleave import LEASE_S
from tests.kernel.race_world import World, world, world_factory

pytestmark = pytest.mark.long

#: The race fixtures this module's tests take (imported, so listed as used).
__all__ = ["world", "world_factory"]


def _reclaims(world: World, occ_id: int) -> list[Any]:
    """The ``occurrence_claimed`` events of ``occ_id`` after its first claim."""
    claimed = [
        e for e in world.stage.kernel.events(occurrence_id=occ_id) if e.type == "occurrence_claimed"
    ]
    return claimed[1:]


def test_two_reclaimers_of_a_lost_lease(world: World) -> None:
    """Two workers find the same expired lease: one reclaims it (fence 2, the same attempt,
    one lost lease counted), the other gets nothing."""

    def round_(i: int) -> None:
        occ_id = world.stage.running("alo").occurrence.id
        world.clock.advance(LEASE_S + 1)
        a, b = world.race(
            i,
            lambda k: k.claim(occ_id, owner="wa", lease=LEASE_S),
            lambda k: k.claim(occ_id, owner="wb", lease=LEASE_S),
            hold=occ_id,
        )
        assert a.ok and b.ok, f"round {i}: {a}, {b}"
        won = [o.value for o in (a, b) if o.value is not None]
        assert len(won) == 1, f"round {i}: {a}, {b}"
        assert (won[0].fence, won[0].occurrence.attempt) == (2, 1), f"round {i}: {won[0]}"
        (reclaim,) = _reclaims(world, occ_id)
        assert reclaim.data["lost_leases"] == 1, f"round {i}: {reclaim.data}"
        assert world.status(occ_id) == "running"
        world.stage.kernel.succeed(occ_id, owner=won[0].owner, fence=2)

    world.repeat(round_, rounds=40)


def test_a_reclaim_against_beats_expiry(world: World) -> None:
    """Beat's expiry leaves an at-least-once lost lease reclaimable; racing it, the claim
    still reclaims once, and a run whose lost leases are spent is a dead letter either way."""

    def round_(i: int) -> None:
        job_id = "alo" if i % 4 < 2 else "once-lost"
        occ_id = world.stage.running(job_id).occurrence.id
        world.clock.advance(LEASE_S + 1)
        claimed, expired = world.race(
            i,
            lambda k: k.claim(occ_id, owner="wa", lease=LEASE_S),
            lambda k: k.expire_leases(),
            hold=occ_id,
        )
        assert claimed.ok and expired.ok, f"round {i}: {claimed}, {expired}"
        status = world.status(occ_id)
        if job_id == "alo":
            assert claimed.value is not None and claimed.value.fence == 2, f"round {i}"
            assert sum(expired.value.values()) == 0, f"round {i}: {expired}"
            (reclaim,) = _reclaims(world, occ_id)
            assert reclaim.data["lost_leases"] == 1
            world.stage.kernel.succeed(occ_id, owner="wa", fence=2)
        else:
            # max_lost_leases 0: the expiry is the run's end whoever meets it first.
            assert claimed.value is None, f"round {i}: {claimed}"
            assert status == "dead_letter", f"round {i}: {status}"
            assert sum(expired.value.values()) in (0, 1)
            error = world.stage.kernel.get_occurrence(occ_id).last_error or {}
            assert error.get("code") == "POISON_PILL"
            assert not _reclaims(world, occ_id)

    world.stage.kernel.define_job(
        {**world.stage.kernel.get_job("alo").spec, "id": "once-lost", "max_lost_leases": 0}
    )
    world.repeat(round_, rounds=40)


def test_the_holders_last_renewal_against_a_reclaim(
    world_factory: Callable[..., World],
) -> None:
    """The holder renews with a checkpoint at the instant its lease is seen expired by
    another worker. Accepted, the renewal's checkpoint is what any later holder resumes
    from; refused (LEASE_LOST, the reclaim came first), it stored nothing."""
    world = world_factory(ahead_s=LEASE_S + 1)

    def round_(i: int) -> None:
        claim = world.stage.running("alo")
        occ_id = claim.occurrence.id
        world.stage.kernel.renew(occ_id, owner="w1", fence=1, lease=LEASE_S, checkpoint={"n": 0})

        def renew(k: Kernel) -> Any:
            return k.renew(occ_id, owner="w1", fence=1, lease=LEASE_S, checkpoint={"n": i + 1})

        renewed, reclaimed = world.race(
            i, renew, lambda k: k.claim(occ_id, owner="w2", lease=LEASE_S), hold=occ_id
        )
        assert reclaimed.ok, f"round {i}: {reclaimed}"
        # The reclaimer's clock is a lease ahead: even a renewed lease has expired for it.
        taken = reclaimed.value
        assert taken is not None and taken.fence == 2, f"round {i}: {reclaimed}"
        stored = world.stage.kernel.get_occurrence(occ_id).checkpoint
        if renewed.ok:
            # Renewed first: the reclaim read the renewal's checkpoint and handed it over.
            assert taken.checkpoint == {"n": i + 1} == stored, f"round {i}: {taken.checkpoint}"
        else:
            assert renewed.code == "LEASE_LOST", f"round {i}: {renewed}"
            assert taken.checkpoint == {"n": 0} == stored, f"round {i}: {taken.checkpoint}"
        world.stage.kernel.succeed(occ_id, owner="w2", fence=2)

    world.repeat(round_, rounds=40)
