"""Retention deleting a chord's row, at once with what else touches the chord (issue 42
item 4, issue 40): two passes deleting a done chord's last two members, a prune against
the settle of the member that completes the chord, and against the settle of a member
whose chain's next step takes its place (the hand-over). The row goes exactly when the
chord is done and its last member is gone; the body is made once, with every result.

Two actors released together, round after round (:mod:`interleave`); on PostgreSQL every
other round of the settles holds the chord's row until both actors wait on it or are done.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from kernel import EnqueueRequest, Kernel
from tests.kernel.interleave import refusals_are_kernel_errors
from tests.kernel.race_world import World, world_factory

pytestmark = pytest.mark.long

__all__ = ["world_factory"]  # fixtures

DAY = 86400.0


def _step(task_id: str, **more: Any) -> dict[str, Any]:
    return {"task": "proj.add", "args": [], "options": {"task_id": task_id}, **more}


def _chords(kernel: Kernel) -> set[str]:
    with kernel.engine.connect() as conn:
        return set(conn.execute(sa.text("SELECT id FROM chords")).scalars())


def _succeeds(occurrence_id: int, fence: int, result: Any) -> Callable[[Kernel], Any]:
    return lambda k: k.succeed(occurrence_id, owner="w1", fence=fence, result=result)


def _retention(*statuses: str) -> Callable[[Kernel], Any]:
    return lambda k: k.apply_retention(dict.fromkeys(statuses, DAY))


def _succeed(world: World, occurrence_id: int, result: Any) -> None:
    [claim] = world.claimed([occurrence_id])
    world.stage.kernel.succeed(occurrence_id, owner="w1", fence=claim.fence, result=result)


def _race(world: World, round_: int, chord: str, *ops: Callable[[Kernel], Any]) -> None:
    outcomes = world.actors.run(*ops, hold=chord if round_ % 2 == 0 else None, hold_table="chords")
    refusals_are_kernel_errors(outcomes)
    assert all(o.ok for o in outcomes), f"round {round_}: {outcomes}"


def test_two_passes_deleting_a_chord_s_last_two_members_delete_its_row(
    world_factory: Callable[..., World],
) -> None:
    """A failed chord: one member cancelled, the other succeeded late; one pass prunes
    the cancels, the other the successes. Each sees the other's member until it commits:
    the one that locks the row second must see both gone."""
    world = world_factory()
    kernel = world.stage.kernel

    def round_(i: int) -> None:
        chord = f"p{i}"
        made = kernel.enqueue_many(
            [EnqueueRequest("proj.add", args=[m], key=f"{chord}-m{m}") for m in range(2)],
            chord={"id": chord, "body": _step(f"{chord}-body")},
        )
        kernel.cancel(made[0].occurrence_id, request_id=f"{chord}-c", operator="op")
        _succeed(world, made[1].occurrence_id, 1)
        world.clock.advance(2 * DAY)
        outcomes = world.actors.run(_retention("succeeded"), _retention("cancelled"))
        refusals_are_kernel_errors(outcomes)
        assert [o.value["occurrences"] for o in outcomes] == [1, 1], f"round {i}: {outcomes}"
        assert chord not in _chords(kernel), f"round {i}: the row outlived its members"

    world.repeat(round_, rounds=40)


def test_a_prune_against_the_settle_that_completes_the_chord(
    world_factory: Callable[..., World],
) -> None:
    """The first member old enough to go, the last one settling: the prune keeps the first
    while the chord waits (the body gets its result) and the row while a member lives."""
    world = world_factory()
    kernel = world.stage.kernel

    def round_(i: int) -> None:
        chord = f"s{i}"
        made = kernel.enqueue_many(
            [EnqueueRequest("proj.add", args=[m], key=f"{chord}-m{m}") for m in range(2)],
            chord={"id": chord, "body": _step(f"{chord}-body")},
        )
        _succeed(world, made[0].occurrence_id, 0)
        world.clock.advance(2 * DAY)
        [last] = world.claimed([made[1].occurrence_id])
        _race(
            world, i, chord, _retention("succeeded"), _succeeds(last.occurrence.id, last.fence, 1)
        )
        [body] = [
            o for o in kernel.list_occurrences(job_id="task:proj.add", limit=1000)
            if o.trigger_key == f"key:{chord}-body"
        ]  # fmt: skip
        assert body.payload["args"] == [[0, 1]], f"round {i}"
        assert chord in _chords(kernel), f"round {i}: the row went with a member left"

    world.repeat(round_, rounds=30)
    world.clock.advance(2 * DAY)
    kernel.apply_retention({"succeeded": DAY}, limit=10_000)
    assert not {c for c in _chords(kernel) if c.startswith("s")}


def test_a_prune_against_a_member_s_hand_over(world_factory: Callable[..., World]) -> None:
    """A member that is a chain: its first step's settle makes the next step, which takes
    its place in the chord, while a prune runs. The body gets the chain's last result;
    the row goes with the last of the members, the step that handed over among them."""
    world = world_factory()
    kernel = world.stage.kernel

    def round_(i: int) -> None:
        chord = f"h{i}"
        members = [
            EnqueueRequest("proj.add", args=[0], key=f"{chord}-m0"),
            EnqueueRequest(
                "proj.add", args=[1], key=f"{chord}-m1",
                callbacks=[_step(f"{chord}-m1-next", continues=True)],
            ),
        ]  # fmt: skip
        made = kernel.enqueue_many(members, chord={"id": chord, "body": _step(f"{chord}-body")})
        _succeed(world, made[0].occurrence_id, 0)
        world.clock.advance(2 * DAY)
        [first] = world.claimed([made[1].occurrence_id])
        _race(
            world, i, chord, _retention("succeeded"), _succeeds(first.occurrence.id, first.fence, 1)
        )
        steps = {
            o.trigger_key: o for o in kernel.list_occurrences(job_id="task:proj.add", limit=1000)
        }
        _succeed(world, steps[f"key:{chord}-m1-next"].id, 11)
        [body] = [
            o for o in kernel.list_occurrences(job_id="task:proj.add", limit=1000)
            if o.trigger_key == f"key:{chord}-body"
        ]  # fmt: skip
        assert body.payload["args"] == [[0, 11]], f"round {i}"
        assert chord in _chords(kernel), f"round {i}"
        world.clock.advance(2 * DAY)
        assert kernel.apply_retention({"succeeded": DAY}, limit=10_000)["occurrences"] >= 3
        assert chord not in _chords(kernel), f"round {i}: the row outlived its members"

    world.repeat(round_, rounds=30)
