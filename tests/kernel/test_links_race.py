"""A run's late success racing Beat's expiry of its lease (issue 40): whichever wins, the
run's links fire once and for that outcome only — its callback or its errback, never both.

Two actors at once, round after round (:mod:`interleave`); on PostgreSQL every other round
holds the row lock until both have read, so both decide from the same running row."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.kernel.interleave import LEASE_S
from tests.kernel.race_world import World, world_factory

pytestmark = pytest.mark.long

__all__ = ["world_factory"]  # fixtures


def test_lease_expiry_vs_late_success_fires_one_link(world_factory: Callable[..., World]) -> None:
    world = world_factory(ahead_s=LEASE_S + 1)
    kernel = world.stage.kernel
    outcomes: set[str] = set()

    def made(key: str) -> list[int]:
        rows = kernel.list_occurrences(job_id="task:proj.after", limit=500)
        return [o.id for o in rows if o.trigger_key == f"key:{key}"]

    def round_(i: int) -> None:
        run = kernel.enqueue(
            task="proj.run",
            key=f"run-{i}",
            settings={"max_attempts": 1, "max_lost_leases": 0},
            callbacks=[{"task": "proj.after", "options": {"task_id": f"ok-{i}"}}],
            errbacks=[{"task": "proj.after", "options": {"task_id": f"err-{i}"}}],
        )
        occ = run.occurrence_id
        claim = kernel.claim(occ, owner="w1", lease=LEASE_S)
        assert claim is not None
        settled, expired = world.race(
            i,
            lambda k: k.succeed(occ, owner="w1", fence=claim.fence, result=i),
            lambda k: k.expire_leases(),
            hold=occ,
        )
        assert expired.ok, f"round {i}: {expired}"
        status = world.status(occ)
        outcomes.add(status)
        if settled.ok:
            assert status == "succeeded", f"round {i}: {settled}, {expired}"
            assert (len(made(f"ok-{i}")), made(f"err-{i}")) == (1, []), f"round {i}"
        else:
            assert settled.code == "LEASE_LOST" and status == "dead_letter", f"round {i}"
            assert (made(f"ok-{i}"), len(made(f"err-{i}"))) == ([], 1), f"round {i}"
        world.clock.advance(2 * LEASE_S)

    world.repeat(round_, rounds=30)
    assert outcomes <= {"succeeded", "dead_letter"}
