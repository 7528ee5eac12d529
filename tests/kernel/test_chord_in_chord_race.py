"""A chord as a chord's member (issue 40), settling at once: the inner chord's last two
members at once make its body once; then that body's settle (which holds the member's
place) and the outer chord's other member at once make the outer body once, with the
inner body's result in the member's place. A chain member ending in a group: its first
step (handing its place to the group's two members) and the other member at once, then
the group's two members at once: the outer body once, the group's results one list in
their place — never two bodies, never none.

Round after round (:mod:`interleave`); on PostgreSQL every other round holds the chord's
row lock until every settle waits on it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kernel import EnqueueRequest
from kernel.store import Kernel
from tests.kernel.interleave import LEASE_S, refusals_are_kernel_errors
from tests.kernel.race_world import World, world_factory

pytestmark = pytest.mark.long

__all__ = ["world_factory"]  # fixtures


def _by_key(kernel: Kernel, task_id: str) -> list[Any]:
    return [o for o in kernel.list_occurrences(limit=1000) if o.trigger_key == f"key:{task_id}"]


def _at_once(world: World, i: int, chord: str, *ids: int) -> None:
    kernel = world.stage.kernel
    claims = [kernel.claim(occ, owner="w1", lease=LEASE_S) for occ in ids]
    assert all(claims)
    outcomes = world.actors.run(
        *(
            lambda k, occ=occ, claim=claim: k.succeed(
                occ, owner="w1", fence=claim.fence, result=occ
            )
            for occ, claim in zip(ids, claims, strict=True)
        ),
        hold=chord if i % 2 == 0 else None,
        hold_table="chords",
    )
    refusals_are_kernel_errors(outcomes)
    assert all(o.ok for o in outcomes), f"round {i}: {outcomes}"


def test_an_inner_body_and_another_member_at_once_make_one_body(
    world_factory: Callable[..., World],
) -> None:
    world = world_factory()
    kernel = world.stage.kernel

    def round_(i: int) -> None:
        inner = {
            "task": "proj.tsum", "options": {"task_id": f"f{i}"},
            "chord": {"id": f"in{i}", "header": [
                {"task": "proj.add", "options": {"task_id": f"d{i}"}},
                {"task": "proj.add", "options": {"task_id": f"e{i}"}},
            ]},
        }  # fmt: skip
        body = {"task": "proj.tsum", "options": {"task_id": f"g{i}"}}
        [b] = kernel.enqueue_many(
            [EnqueueRequest("proj.add", key=f"b{i}")],
            chord={"id": f"out{i}", "body": body},
            nested=[(0, inner)],
        )
        [d], [e] = _by_key(kernel, f"d{i}"), _by_key(kernel, f"e{i}")
        _at_once(world, i, f"in{i}", d.id, e.id)
        fs = _by_key(kernel, f"f{i}")
        assert len(fs) == 1, f"round {i}: {len(fs)} inner bodies"
        assert fs[0].payload["args"] == [[d.id, e.id]], f"round {i}"
        assert _by_key(kernel, f"g{i}") == [], f"round {i}"
        _at_once(world, i, f"out{i}", b.occurrence_id, fs[0].id)
        bodies = _by_key(kernel, f"g{i}")
        assert len(bodies) == 1, f"round {i}: {len(bodies)} bodies"
        assert bodies[0].payload["args"] == [[fs[0].id, b.occurrence_id]], f"round {i}"

    world.repeat(round_, rounds=30)


def test_a_group_a_member_chain_ends_with_and_another_member_at_once_make_one_body(
    world_factory: Callable[..., World],
) -> None:
    world = world_factory()
    kernel = world.stage.kernel

    def round_(i: int) -> None:
        group = [
            {"task": "proj.add", "shares": True, "options": {"task_id": f"x{i}-{n}"}}
            for n in range(2)
        ]
        members = [
            EnqueueRequest("proj.add", key=f"a{i}", callbacks=group),
            EnqueueRequest("proj.add", key=f"b{i}"),
        ]
        body = {"task": "proj.tsum", "options": {"task_id": f"g{i}"}}
        made = kernel.enqueue_many(members, chord={"id": f"out{i}", "body": body})
        # The chain's hand-over to the group (one more place) beside the other's count.
        _at_once(world, i, f"out{i}", made[0].occurrence_id, made[1].occurrence_id)
        assert _by_key(kernel, f"g{i}") == [], f"round {i}: a body before the group's"
        [x0], [x1] = _by_key(kernel, f"x{i}-0"), _by_key(kernel, f"x{i}-1")
        _at_once(world, i, f"out{i}", x0.id, x1.id)
        bodies = _by_key(kernel, f"g{i}")
        assert len(bodies) == 1, f"round {i}: {len(bodies)} bodies"
        expected = [[[x0.id, x1.id], made[1].occurrence_id]]
        assert bodies[0].payload["args"] == expected, f"round {i}"

    world.repeat(round_, rounds=30)
