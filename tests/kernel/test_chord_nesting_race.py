"""A chord whose members are chains (issue 40), their steps settling at once: two first
steps handing their places over together (the compare-and-set on the members, read again
when the other wrote first), then the last steps of two members at once; and a member
chain ending in a chord, whose inner members end at once, then its inner body and the
other member at once. Exactly one settle makes each body, with each chain's end result in
its member's place — never both, never neither.

Round after round (:mod:`interleave`); on PostgreSQL every other round holds the chord's
row lock until both settles wait on it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kernel import EnqueueRequest
from kernel.store import Kernel
from tests.kernel.race_world import World, world_factory

pytestmark = pytest.mark.long

__all__ = ["world_factory"]  # fixtures


def _by_key(kernel: Kernel, task_id: str) -> list[Any]:
    return [o for o in kernel.list_occurrences(limit=1000) if o.trigger_key == f"key:{task_id}"]


def _succeed_at_once(world: World, i: int, chord: str, *ids: int) -> None:
    """The runs ``ids`` claimed, then succeeding at once (each its own id as result)."""
    world.at_chord(
        i,
        chord,
        *(
            lambda k, claim=claim: k.succeed(
                claim.occurrence.id, owner="w1", fence=claim.fence, result=claim.occurrence.id
            )
            for claim in world.claimed(ids)
        ),
    )


def test_chain_members_ending_at_once_make_one_body(world_factory: Callable[..., World]) -> None:
    world = world_factory()
    kernel = world.stage.kernel

    def round_(i: int) -> None:
        chord = f"n{i}"
        members = [
            EnqueueRequest(
                "proj.add",
                args=[m],
                key=f"{chord}-{m}",
                callbacks=[
                    {"task": "proj.add", "continues": True, "options": {"task_id": f"{chord}-{m}e"}}
                ],
            )
            for m in range(2)
        ]
        body = {"task": "proj.tsum", "options": {"task_id": f"b{i}"}}
        made = kernel.enqueue_many(members, chord={"id": chord, "body": body})
        _succeed_at_once(world, i, chord, *(m.occurrence_id for m in made))
        ends = [_by_key(kernel, f"{chord}-{m}e") for m in range(2)]
        assert all(len(end) == 1 for end in ends), f"round {i}"
        assert _by_key(kernel, f"b{i}") == [], f"round {i}: a first step counted"
        end_ids = [end.id for [end] in ends]
        _succeed_at_once(world, i, chord, *end_ids)
        bodies = _by_key(kernel, f"b{i}")
        assert len(bodies) == 1, f"round {i}: {len(bodies)} bodies"
        assert bodies[0].payload["args"] == [end_ids], f"round {i}"

    world.repeat(round_, rounds=30)


def test_a_member_chain_s_inner_chord_and_the_outer_end_at_once_once(
    world_factory: Callable[..., World],
) -> None:
    """A member that is ``chain(c, chord([d, e], f))`` beside a plain member ``b``: the
    inner chord's last two members at once make ``f`` once, in the member's place; then
    ``f`` and ``b`` at once make the outer body once, with ``f``'s result in that place."""
    world = world_factory()
    kernel = world.stage.kernel

    def round_(i: int) -> None:
        inner = {"id": f"in{i}", "header": [
            {"task": "proj.add", "options": {"task_id": f"d{i}"}},
            {"task": "proj.add", "options": {"task_id": f"e{i}"}},
        ]}  # fmt: skip
        last = {"task": "proj.tsum", "continues": True, "options": {"task_id": f"f{i}"},
                "chord": inner}  # fmt: skip
        members = [
            EnqueueRequest("proj.add", key=f"b{i}"),
            EnqueueRequest("proj.add", key=f"c{i}", callbacks=[last]),
        ]
        body = {"task": "proj.tsum", "options": {"task_id": f"g{i}"}}
        made = kernel.enqueue_many(members, chord={"id": f"out{i}", "body": body})
        [claim] = world.claimed([made[1].occurrence_id])
        kernel.succeed(made[1].occurrence_id, owner="w1", fence=claim.fence, result=3)
        [d], [e] = _by_key(kernel, f"d{i}"), _by_key(kernel, f"e{i}")
        _succeed_at_once(world, i, f"in{i}", d.id, e.id)
        fs = _by_key(kernel, f"f{i}")
        assert len(fs) == 1, f"round {i}: {len(fs)} inner bodies"
        assert _by_key(kernel, f"g{i}") == [], f"round {i}"
        _succeed_at_once(world, i, f"out{i}", made[0].occurrence_id, fs[0].id)
        bodies = _by_key(kernel, f"g{i}")
        assert len(bodies) == 1, f"round {i}: {len(bodies)} bodies"
        assert bodies[0].payload["args"] == [[made[0].occurrence_id, fs[0].id]], f"round {i}"

    world.repeat(round_, rounds=30)
