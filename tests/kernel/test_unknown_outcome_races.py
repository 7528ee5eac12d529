"""An at-most-once run's unknown outcome settling while an operator cancels it (issue 23).

Two actors at once, round after round (:mod:`interleave`); every other round on PostgreSQL
holds the row lock until both have read. Whatever the order, the run is never retried:
an accepted cancel ends ``cancelled`` (the settle sees it, inside its statement), and a
cancel that comes second finds the occurrence waiting for a verdict and is refused.
"""

from __future__ import annotations

import pytest

from kernel.states import Effect
from tests.kernel.interleave import job_spec
from tests.kernel.race_world import World, world, world_factory

pytestmark = pytest.mark.long

__all__ = ["world", "world_factory"]  # fixtures


def test_cancel_vs_unknown_outcome(world: World) -> None:
    ended: set[str] = set()

    def round_(i: int) -> None:
        claim = world.stage.running("amo")
        occ, owner, fence = claim.occurrence.id, claim.owner, claim.fence
        rid = world.stage.next_id("cancel")
        settled, cancelled = world.race(
            i,
            lambda k: k.fail(
                occ,
                owner=owner,
                fence=fence,
                code="TIMEOUT",
                message="no answer after sending",
                effect=Effect.UNKNOWN,
            ),
            lambda k: k.cancel(occ, request_id=rid, operator="op"),
            hold=occ,
        )
        assert settled.ok, f"round {i}: settle refused: {settled}"
        status = world.status(occ)
        ended.add(status)
        if cancelled.ok:
            assert status == "cancelled", f"round {i}: cancel accepted, then {settled}: {status}"
        else:
            assert cancelled.code == "STATE_CONFLICT", f"round {i}: {cancelled}"
            assert status == "needs_adjudication", f"round {i}: {status}"
        assert settled.value == status, f"round {i}: settle said {settled.value}, is {status}"
        assert world.stage.kernel.claim(occ, owner="w2", lease=30) is None
        if status == "needs_adjudication":  # it would hold back the next round's run
            world.stage.kernel.adjudicate(
                occ, decision="abandon", request_id=world.stage.next_id("adj"), operator="op"
            )

    world.repeat(round_, rounds=40)
    assert ended <= {"cancelled", "needs_adjudication"}


def test_unknown_outcome_vs_claim_of_the_next_run(world: World) -> None:
    """Overlap queue: the next occurrence never starts beside the run whose outcome
    becomes unknown: while it runs the claim is exclusive, once it settled it is unresolved."""
    job_id = "amo-queue"
    world.stage.kernel.define_job(job_spec(job_id, delivery="at-most-once", overlap="queue"))

    def round_(i: int) -> None:
        claim = world.stage.running(job_id)
        occ, owner, fence = claim.occurrence.id, claim.owner, claim.fence
        (after,) = world.stage.fresh(job_id)
        settled, claimed = world.race(
            i,
            lambda k: k.fail(
                occ, owner=owner, fence=fence, code="TIMEOUT", message="?", effect=Effect.UNKNOWN
            ),
            lambda k: k.claim(after, owner="w2", lease=30),
            hold=occ,
        )
        assert settled.ok and settled.value == "needs_adjudication", f"round {i}: {settled}"
        assert claimed.ok and claimed.value is None, f"round {i}: claimed beside it: {claimed}"
        assert world.status(after) == "queued"
        world.stage.kernel.adjudicate(
            occ, decision="abandon", request_id=world.stage.next_id("adj"), operator="op"
        )
        world.stage.kernel.cancel(after, request_id=world.stage.next_id("c"), operator="op")

    world.repeat(round_, rounds=40)
