"""An open chord closed while its last member settles (issue 40): exactly one of the two
makes the body, with every member's result in group order: never both, never neither.
And two members adding to their chord at once (add_to_chord): both counted in.

Two actors at once, round after round (:mod:`interleave`); on PostgreSQL every other round
holds the chord's row lock until both wait on it, so both write the row from the same
state, one after the other."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kernel import EnqueueRequest
from tests.kernel.race_world import World, world_factory

pytestmark = pytest.mark.long

__all__ = ["world_factory"]  # fixtures


def _bodies(world: World, task_id: str) -> list[list[object]]:
    kernel = world.stage.kernel
    return [
        o.payload["args"]
        for o in kernel.list_occurrences(job_id="task:proj.tsum", limit=500)
        if o.trigger_key == f"key:{task_id}"
    ]


def test_the_close_and_the_last_member_s_settle_at_once_make_one_body(
    world_factory: Callable[..., World],
) -> None:
    world = world_factory()
    kernel = world.stage.kernel

    def round_(i: int) -> None:
        chord = f"c{i}"
        body = {"task": "proj.tsum", "options": {"task_id": f"b{i}"}}
        kernel.enqueue_many([], chord={"id": chord, "body": body, "open": True})
        ids = [
            kernel.enqueue_many(
                [EnqueueRequest("proj.add", args=[m], key=f"{chord}-{m}")],
                chord={"id": chord, "grow": "caller"},
            )[0].occurrence_id
            for m in range(2)
        ]
        claims = world.claimed(ids)
        kernel.succeed(ids[0], owner="w1", fence=claims[0].fence, result=0)
        world.at_chord(
            i,
            chord,
            lambda k: k.close_chord(chord),
            lambda k: k.succeed(ids[1], owner="w1", fence=claims[1].fence, result=1),
        )
        assert _bodies(world, f"b{i}") == [[[0, 1]]], f"round {i}"
        completed = [
            e
            for e in kernel.events(types=["chord_completed"], limit=1000)
            if e.data["chord_id"] == chord
        ]
        assert len(completed) == 1, f"round {i}"

    world.repeat(round_, rounds=30)


def test_two_members_adding_at_once_are_both_counted_in(
    world_factory: Callable[..., World],
) -> None:
    world = world_factory()
    kernel = world.stage.kernel

    def round_(i: int) -> None:
        chord = f"a{i}"
        body = {"task": "proj.tsum", "options": {"task_id": f"ab{i}"}}
        made = kernel.enqueue_many(
            [EnqueueRequest("proj.add", args=[m], key=f"{chord}-{m}") for m in range(2)],
            chord={"id": chord, "body": body},
        )
        ids = [m.occurrence_id for m in made]
        fences = [claim.fence for claim in world.claimed(ids)]

        def add(index: int) -> Callable[..., object]:
            extra = EnqueueRequest("proj.add", args=[9], key=f"{chord}-x{index}")
            return lambda k: k.add_to_chord(
                ids[index], owner="w1", fence=fences[index], requests=[extra]
            )

        world.at_chord(i, chord, add(0), add(1))
        for index, occ in enumerate(ids):
            kernel.succeed(occ, owner="w1", fence=fences[index], result=index)
        assert _bodies(world, f"ab{i}") == [], f"round {i}: the added have not settled"
        added = [
            o.id
            for o in kernel.list_occurrences(job_id="task:proj.add", limit=500)
            if o.trigger_key.startswith(f"key:{chord}-x")
        ]
        assert len(added) == 2, f"round {i}"
        for claim in world.claimed(added):
            kernel.succeed(claim.occurrence.id, owner="w1", fence=claim.fence, result=9)
        assert _bodies(world, f"ab{i}") == [[[0, 1, 9, 9]]], f"round {i}"

    world.repeat(round_, rounds=20)
