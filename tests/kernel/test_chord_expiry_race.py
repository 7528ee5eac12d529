"""A chord's member skipped ``expired`` at the instant another member settles (issue 40):
whichever commits first, the chord fails exactly once (one ``chord_failed``, the body's
errback made once) and its body is never made — the other member's success counts
nothing on a failed chord, and a failed chord fails no second time.

Two actors released at once, round after round (:mod:`interleave`); on PostgreSQL every
other round holds the chord's row until both the skip and the settle wait on it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kernel import EnqueueRequest, Kernel
from tests.kernel.race_world import World, world_factory

pytestmark = pytest.mark.long

__all__ = ["world_factory"]  # fixtures

ONCE = {"max_attempts": 1, "max_lost_leases": 0}


@pytest.mark.parametrize("other", ["succeeds", "dead_letter"])
def test_an_expiry_skip_and_another_member_s_settle_fail_the_chord_once(
    world_factory: Callable[..., World], other: str
) -> None:
    world = world_factory()
    kernel = world.stage.kernel

    def round_(i: int) -> None:
        chord = f"x{i}"
        errback = {"task": "proj.on_error", "options": {"task_id": f"xe{i}"}}
        body = {"task": "proj.tsum", "options": {"task_id": f"xb{i}"}, "errbacks": [errback]}
        made = kernel.enqueue_many(
            [
                EnqueueRequest("proj.add", args=[0], key=f"{chord}-0", settings=ONCE),
                EnqueueRequest("proj.add", args=[1], key=f"{chord}-1", expires=1),
            ],
            chord={"id": chord, "body": body},
        )
        [claim] = world.claimed([made[0].occurrence_id])
        world.clock.advance(2)  # member 1's deadline passed; member 0's lease holds

        def settle(k: Kernel) -> Any:
            if other == "succeeds":
                return k.succeed(claim.occurrence.id, owner="w1", fence=claim.fence, result=0)
            return k.fail(claim.occurrence.id, owner="w1", fence=claim.fence, code="E",
                          message="x", retryable=False)  # fmt: skip

        world.at_chord(i, chord, lambda k: k.skip_expired(), settle)
        where = f"round {i}"
        assert kernel.get_occurrence(made[1].occurrence_id).skip_reason == "expired", where
        keys = [o.trigger_key for o in kernel.list_occurrences(limit=1000)]
        assert f"key:xb{i}" not in keys, where
        assert keys.count(f"key:xe{i}") == 1, where
        failed = [
            e
            for occ in (m.occurrence_id for m in made)
            for e in kernel.events(occurrence_id=occ)
            if e.type == "chord_failed"
        ]
        assert len(failed) == 1, where
        # A success never fails the chord: the skip did. A dead letter may have.
        reasons = {"expired"} if other == "succeeds" else {"expired", "dead_letter"}
        assert failed[0].data["reason"] in reasons, where
        for m in made:
            world.state(m.occurrence_id)

    world.repeat(round_, rounds=30)
