"""A chord whose body is a group failed by two header members at once (issue 40): every
errback of every member of the group body is made exactly once, and the chord fails once
— never twice, never not at all.

Two actors released together, round after round (:mod:`interleave`); on PostgreSQL every
other round holds the chord's row lock until both failures wait on it, so both read the
row unfailed and one fails it after the other's commit."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from kernel import EnqueueRequest, Kernel
from tests.kernel.interleave import LEASE_S, refusals_are_kernel_errors
from tests.kernel.race_world import World, world_factory

pytestmark = pytest.mark.long

__all__ = ["world_factory"]  # fixtures

ONCE = {"max_attempts": 1, "max_lost_leases": 0}


def _errback(tag: str) -> dict[str, Any]:
    """As Celery links one: no task id of its own (keyed by the chord), immutable."""
    return {"task": "proj.echo", "args": [tag], "immutable": True}


def _fails(occurrence_id: int, fence: int) -> Callable[[Kernel], Any]:
    return lambda k: k.fail(occurrence_id, owner="w1", fence=fence, code="E", message="x")


def test_two_header_members_failing_at_once_give_each_errback_once(
    world_factory: Callable[..., World],
) -> None:
    world = world_factory()
    kernel = world.stage.kernel

    def round_(i: int) -> None:
        chord = f"e{i}"
        body = [
            {"task": "proj.tsum", "options": {"task_id": f"{chord}-b0"},
             "errbacks": [_errback("own"), _errback("chord")]},
            {"task": "proj.tsum", "options": {"task_id": f"{chord}-b1"},
             "errbacks": [_errback("chord")]},
        ]  # fmt: skip
        made = kernel.enqueue_many(
            [EnqueueRequest("proj.fail", args=[m], key=f"{chord}-{m}", settings=ONCE)
             for m in range(2)],
            chord={"id": chord, "body": body},
        )  # fmt: skip
        claims = [kernel.claim(m.occurrence_id, owner="w1", lease=LEASE_S) for m in made]
        assert all(c is not None for c in claims)
        outcomes = world.actors.run(
            *(_fails(m.occurrence_id, c.fence) for m, c in zip(made, claims, strict=True) if c),
            hold=chord if i % 2 == 0 else None,
            hold_table="chords",
        )
        refusals_are_kernel_errors(outcomes)
        assert all(o.ok for o in outcomes), f"round {i}: {outcomes}"
        echoes = Counter(
            (o.payload["args"][0], o.payload["request"]["parent_id"])
            for o in kernel.list_occurrences(job_id="task:proj.echo", limit=1000)
            if f"chord-errbacks:{chord}:" in o.trigger_key
        )
        assert echoes == {
            ("own", f"{chord}-b0"): 1, ("chord", f"{chord}-b0"): 1, ("chord", f"{chord}-b1"): 1,
        }, f"round {i}"  # fmt: skip
        failed = [
            e for m in made for e in kernel.events(occurrence_id=m.occurrence_id)
            if e.type == "chord_failed"
        ]  # fmt: skip
        assert len(failed) == 1, f"round {i}"

    world.repeat(round_, rounds=30)
