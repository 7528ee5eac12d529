"""The world a race test runs in: a staging kernel, actors, their clock (issue 8).

:class:`World` stages occurrences through one kernel and races operations on them
through :class:`~tests.kernel.interleave.Actors`; the ``world`` fixtures open one on
SQLite and on PostgreSQL. ``KERNEL_RACE_ROUNDS`` overrides every test's rounds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa

from kernel.store import Kernel
from kernel.testing import ManualClock
from kernel.types import Claim
from tests.kernel.interleave import (
    LEASE_S,
    Actors,
    Outcome,
    Stage,
    counter_problems,
    occurrence_state,
    problems,
    race_rounds,
    refusals_are_kernel_errors,
)

__all__ = ["Ahead", "World", "world", "world_factory"]


class Ahead(ManualClock):
    """A clock ``seconds`` ahead of ``base``: a transaction that began later (Beat's expiry)."""

    def __init__(self, base: ManualClock, seconds: float) -> None:
        super().__init__()
        self.base, self.offset_ms = base, int(seconds * 1000)

    def now_ms(self, conn: sa.Connection) -> int:
        return self.base.ms + self.offset_ms


@dataclass
class World:
    stage: Stage
    actors: Actors
    clock: ManualClock
    postgres: bool

    def repeat(self, round_: Callable[[int], None], rounds: int = 100) -> None:
        """Run ``round_`` with 0, 1, 2, ...: ``rounds`` times on PostgreSQL, 5 on SQLite."""
        for i in range(race_rounds(self.postgres, rounds)):
            round_(i)

    def race(self, round_: int, *ops: Callable[[Kernel], Any], hold: int | None) -> list[Outcome]:
        """Run ``ops`` at once; on even rounds hold ``hold``'s row lock until all have read."""
        outcomes = self.actors.run(*ops, hold=hold if round_ % 2 == 0 else None)
        refusals_are_kernel_errors(outcomes)
        return outcomes

    def claimed(self, occurrence_ids: Sequence[int], owner: str = "w1") -> list[Claim]:
        """Each of ``occurrence_ids`` claimed by ``owner``, in order."""
        claims = [
            self.stage.kernel.claim(occ, owner=owner, lease=LEASE_S) for occ in occurrence_ids
        ]
        assert all(claims), f"not all claimable: {occurrence_ids}"
        return [c for c in claims if c is not None]

    def at_chord(self, round_: int, chord: str, *ops: Callable[[Kernel], Any]) -> None:
        """Run ``ops`` at once; on even rounds (PostgreSQL) the chord's row is held until
        every one waits on it, so all write it from the same state. Each must succeed."""
        outcomes = self.actors.run(
            *ops, hold=chord if round_ % 2 == 0 else None, hold_table="chords"
        )
        refusals_are_kernel_errors(outcomes)
        assert all(o.ok for o in outcomes), f"round {round_}: {outcomes}"

    def state(self, occ_id: int) -> dict[str, Any]:
        """The occurrence's rows, checked: nothing stuck, the log names the state."""
        state = occurrence_state(self.stage.kernel, occ_id)
        found = problems(state, self.clock.ms)
        assert not found, f"occurrence {occ_id}: {found}; events {state['events']}"
        return state

    def status(self, occ_id: int) -> str:
        return str(self.state(occ_id)["occurrence"]["status"])

    def check_job(self, job_id: str, since: int = 0) -> dict[int, str]:
        """The occurrences of ``job_id`` from id ``since`` on, checked as :meth:`state`
        does, and every counter (pools, budgets) against its rows; statuses by id."""
        found = counter_problems(self.stage.kernel)
        assert not found, f"counters: {found}"
        occurrences = self.stage.kernel.list_occurrences(job_id=job_id, limit=1000)
        return {o.id: self.status(o.id) for o in occurrences if o.id >= since}


@pytest.fixture
def world_factory(kernel_url: str) -> Iterator[Callable[..., World]]:
    opened: list[tuple[Kernel, Actors]] = []

    def make(ahead_s: float | None = None) -> World:
        """Two actors; with ``ahead_s`` the second one's clock runs that far ahead."""
        clock = ManualClock()
        kernel = Kernel.open(kernel_url, migrate_schema=True, clock=clock)
        second = clock if ahead_s is None else Ahead(clock, ahead_s)
        actors = Actors(kernel_url, [clock, second])
        opened.append((kernel, actors))
        return World(Stage(kernel, clock), actors, clock, kernel_url.startswith("postgresql"))

    yield make
    for kernel, actors in opened:
        actors.close()
        kernel.close()


@pytest.fixture
def world(world_factory: Callable[..., World]) -> World:
    return world_factory()
