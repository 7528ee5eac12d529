"""A chord's last two members settling at once (issue 40): exactly one of the two settles
makes the body, with every member's result in group order — never both, never neither.

Two actors at once, round after round (:mod:`interleave`); on PostgreSQL every other round
holds the chord's row lock until both settles wait on it, so both count down the row
from the same state, one after the other."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from kernel import EnqueueRequest, Kernel
from kernel.types import Claim
from tests.kernel.race_world import World, world_factory

pytestmark = pytest.mark.long

__all__ = ["world_factory"]  # fixtures


def _succeeds(claims: Sequence[Claim], n: int) -> Callable[[Kernel], Any]:
    """The success of member ``n`` (its result ``n``) by the worker holding it."""
    return lambda k: k.succeed(claims[n].occurrence.id, owner="w1", fence=claims[n].fence, result=n)


def test_the_last_two_members_at_once_make_one_body(world_factory: Callable[..., World]) -> None:
    world = world_factory()
    kernel = world.stage.kernel

    def round_(i: int) -> None:
        chord = f"c{i}"
        made = kernel.enqueue_many(
            [EnqueueRequest("proj.add", args=[m], key=f"{chord}-{m}") for m in range(3)],
            chord={"id": chord, "body": {"task": "proj.tsum", "options": {"task_id": f"b{i}"}}},
        )
        ids = [m.occurrence_id for m in made]
        claims = world.claimed(ids)
        _succeeds(claims, 0)(kernel)
        world.at_chord(i, chord, _succeeds(claims, 1), _succeeds(claims, 2))
        bodies = [
            o
            for o in kernel.list_occurrences(job_id="task:proj.tsum", limit=500)
            if o.trigger_key == f"key:b{i}"
        ]
        assert len(bodies) == 1, f"round {i}: {len(bodies)} bodies"
        assert bodies[0].payload["args"] == [[0, 1, 2]], f"round {i}"
        completed = [
            e
            for occ in ids[1:]
            for e in kernel.events(occurrence_id=occ)
            if e.type == "chord_completed"
        ]
        assert len(completed) == 1, f"round {i}"

    world.repeat(round_, rounds=30)


def test_the_last_two_members_at_once_make_the_next_chord_once(
    world_factory: Callable[..., World],
) -> None:
    """A chord whose body is a chord (``then``): the settle that completes the first makes
    the second's members and row once, with the first's results in group order."""
    world = world_factory()
    kernel = world.stage.kernel

    def round_(i: int) -> None:
        chord = f"n{i}"
        header = [{"task": "proj.add", "args": [j], "options": {"task_id": f"n{i}-2-{j}"}}
                  for j in range(2)]  # fmt: skip
        body = {"task": "proj.tsum", "options": {"task_id": f"nb{i}"},
                "chord": {"id": f"{chord}-2", "header": header}}  # fmt: skip
        made = kernel.enqueue_many(
            [EnqueueRequest("proj.add", args=[m], key=f"{chord}-{m}") for m in range(2)],
            chord={"id": chord, "body": body},
        )
        claims = world.claimed([m.occurrence_id for m in made])
        world.at_chord(i, chord, _succeeds(claims, 0), _succeeds(claims, 1))
        second = [
            o
            for o in kernel.list_occurrences(job_id="task:proj.add", limit=500)
            if o.trigger_key.startswith(f"key:n{i}-2-")
        ]
        assert sorted(o.payload["args"][1] for o in second) == [0, 1], f"round {i}"
        assert all(o.payload["args"][0] == [0, 1] for o in second), f"round {i}"

    world.repeat(round_, rounds=30)


def test_a_member_failing_as_the_other_succeeds_fails_a_chain_body_once_under_its_id(
    world_factory: Callable[..., World],
) -> None:
    """A chord whose body is a chain (its first step carrying the rest, ``result_id`` the
    chain's last step's): one member dead-lettered while the other succeeds, at once, fails
    the chord once, its errback given the chain's id; no step of the chain is made."""
    world = world_factory()
    kernel = world.stage.kernel
    once = {"max_attempts": 1, "max_lost_leases": 0}

    def round_(i: int) -> None:
        chord = f"f{i}"
        rest = {"task": "proj.add", "args": [1], "options": {"task_id": f"fl{i}"}}
        errback = {"task": "proj.on_error", "options": {"task_id": f"fe{i}"}}
        body = {"task": "proj.tsum", "options": {"task_id": f"fb{i}"},
                "callbacks": [rest], "errbacks": [errback]}  # fmt: skip
        made = kernel.enqueue_many(
            [EnqueueRequest("proj.add", args=[m], key=f"{chord}-{m}", settings=once)
             for m in range(2)],
            chord={"id": chord, "body": body, "result_id": f"fl{i}"},
        )  # fmt: skip
        claims = world.claimed([m.occurrence_id for m in made])
        failing = claims[1]
        world.at_chord(
            i,
            chord,
            _succeeds(claims, 0),
            lambda k: k.fail(
                failing.occurrence.id, owner="w1", fence=failing.fence, code="E", message="x"
            ),
        )
        keys = [o.trigger_key for o in kernel.list_occurrences(limit=500)]
        assert f"key:fb{i}" not in keys and f"key:fl{i}" not in keys, f"round {i}"
        [errback_run] = [
            o for o in kernel.list_occurrences(job_id="task:proj.on_error", limit=500)
            if o.trigger_key == f"key:fe{i}"
        ]  # fmt: skip
        assert errback_run.payload["args"] == [f"fl{i}"], f"round {i}"

    world.repeat(round_, rounds=30)
