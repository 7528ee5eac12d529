"""Celery's revoke of a routed run racing the run's own writes (issue 40's owed proofs).

A revoke is carried out by every worker of its broadcast, each with its own connections,
while the run may be claimed or settled at the same instant: its cancel is one guarded
statement, so exactly one of the racing writes moves the run, and each revoke's answer
says what the run is now (the status the winner left), never what it read before. Two
actors at once, round after round (:mod:`interleave`); on PostgreSQL every other round
holds the run's row lock until both wait on it, so both write from the same reading.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kernel import EnqueueRequest, Kernel
from tests.kernel.interleave import LEASE_S, Outcome
from tests.kernel.race_world import World, world, world_factory

pytestmark = pytest.mark.long

__all__ = ["world", "world_factory"]  # fixtures


def _routed(world: World, key: str) -> int:
    """A routed run its caller knows by the task id ``key``, queued."""
    [made] = world.stage.kernel.enqueue_many([EnqueueRequest("proj.add", args=[1], key=key)])
    return made.occurrence_id


def _revoke(key: str, *, terminate: bool) -> Callable[[Kernel], Any]:
    def revoke(k: Kernel) -> Any:
        [answer] = k.revoke([key], terminate=terminate, operator=f"celery-revoke@{id(k)}")
        return answer

    return revoke


def _answer(outcome: Outcome) -> tuple[str, bool]:
    assert outcome.ok, outcome
    return outcome.value.status, outcome.value.moved


def test_two_workers_revoking_at_once_cancel_once_and_both_say_cancelled(world: World) -> None:
    def round_(i: int) -> None:
        occ = _routed(world, f"r{i}")
        first, second = world.race(
            i, _revoke(f"r{i}", terminate=False), _revoke(f"r{i}", terminate=False), hold=occ
        )
        answers = sorted([_answer(first), _answer(second)])
        assert answers == [("cancelled", False), ("cancelled", True)], f"round {i}"
        assert world.status(occ) == "cancelled", f"round {i}"
        events = [e.type for e in world.stage.kernel.events(occurrence_id=occ)]
        assert events.count("occurrence_cancelled") == 1, f"round {i}: {events}"

    world.repeat(round_, rounds=40)


def test_a_revoke_racing_a_claim_either_cancels_or_finds_it_running(world: World) -> None:
    def round_(i: int) -> None:
        occ = _routed(world, f"c{i}")
        claimed, revoked = world.race(
            i,
            lambda k: k.claim(occ, owner="w1", lease=LEASE_S),
            _revoke(f"c{i}", terminate=False),
            hold=occ,
        )
        assert claimed.ok, f"round {i}: {claimed}"
        status = world.status(occ)
        if claimed.value is not None:  # the claim first: the revoke leaves it running
            assert (status, _answer(revoked)) == ("running", ("running", False)), f"round {i}"
        else:  # the revoke first: nothing claims it
            assert (status, _answer(revoked)) == ("cancelled", ("cancelled", True)), f"round {i}"

    world.repeat(round_, rounds=40)


def test_a_terminating_revoke_racing_the_run_s_settle_asks_it_or_finds_it_ended(
    world: World,
) -> None:
    def round_(i: int) -> None:
        occ = _routed(world, f"s{i}")
        claim = world.stage.kernel.claim(occ, owner="w1", lease=LEASE_S)
        assert claim is not None
        settled, revoked = world.race(
            i,
            lambda k: k.succeed(occ, owner="w1", fence=claim.fence, result=i),
            _revoke(f"s{i}", terminate=True),
            hold=occ,
        )
        assert settled.ok, f"round {i}: {settled}"  # a run that finished keeps its result
        assert world.status(occ) == "succeeded", f"round {i}"
        asked = [e for e in world.stage.kernel.events(occurrence_id=occ)
                 if e.type == "occurrence_cancel_requested"]  # fmt: skip
        if asked:  # the revoke first: the run was asked to stop, then finished
            assert _answer(revoked) == ("running", True), f"round {i}"
        else:  # the settle first: the revoke finds it ended
            assert _answer(revoked) == ("succeeded", False), f"round {i}"

    world.repeat(round_, rounds=40)
