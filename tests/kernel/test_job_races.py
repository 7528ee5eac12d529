"""Two writers on one job definition at the same instant: delete, disable, run-now.

A delete decides in its DELETE (nothing unsettled, nothing chained) while holding the job
row every occurrence maker holds too, so a run-now racing a delete either runs (and the
delete is refused) or is refused NOT_FOUND: never a deleted job with an occurrence left to
run. Two disables flip the flag once: one ``job_disabled`` event, one ``changed``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from kernel.store import Kernel
from kernel.testing import ManualClock
from tests.kernel.interleave import Actors, race_rounds, refusals_are_kernel_errors

pytestmark = pytest.mark.timeout(240)


def _spec(job_id: str) -> dict[str, Any]:
    return {
        "id": job_id,
        "kind": "callable",
        "payload": {"callable": "jobs.sample:run"},
        "schedule": {"every": "1h"},
        "overlap": "allow",
    }


@pytest.fixture
def pair(kernel_url: str) -> Iterator[tuple[Kernel, Actors, bool]]:
    clock = ManualClock()
    kernel = Kernel.open(kernel_url, migrate_schema=True, clock=clock)
    actors = Actors(kernel_url, [clock, clock])
    yield kernel, actors, kernel_url.startswith("postgresql")
    actors.close()
    kernel.close()


def _unsettled(kernel: Kernel, job_id: str) -> int:
    with kernel.engine.connect() as conn:
        return int(
            conn.execute(
                sa.text(
                    "SELECT count(*) FROM occurrences WHERE job_id = :j AND status NOT IN"
                    " ('succeeded', 'dead_letter', 'cancelled', 'skipped')"
                ),
                {"j": job_id},
            ).scalar_one()
        )


def test_delete_vs_run_now(pair: tuple[Kernel, Actors, bool]) -> None:
    kernel, actors, postgres = pair
    for i in range(race_rounds(postgres, 40)):
        job_id = f"race-{i}"
        kernel.define_job(_spec(job_id))
        deleted, ran = actors.run(
            lambda k, j=job_id: k.delete_job(j, operator="ops"),
            lambda k, j=job_id: k.run_now(j, request_id=f"rn-{j}", operator="ops"),
        )
        refusals_are_kernel_errors([deleted, ran])
        exists = any(j.id == job_id for j in kernel.list_jobs())
        if deleted.ok:
            assert not exists and _unsettled(kernel, job_id) == 0, (i, deleted, ran)
            assert ran.code == "NOT_FOUND", (i, ran)
        else:
            assert deleted.code == "STATE_CONFLICT" and ran.ok, (i, deleted, ran)
            assert exists and _unsettled(kernel, job_id) == 1


def test_two_disables_flip_once(pair: tuple[Kernel, Actors, bool]) -> None:
    kernel, actors, postgres = pair
    for i in range(race_rounds(postgres, 40)):
        job_id = f"flip-{i}"
        kernel.define_job(_spec(job_id))
        outcomes = actors.run(
            lambda k, j=job_id: k.set_job_enabled(j, False, operator="a"),
            lambda k, j=job_id: k.set_job_enabled(j, False, operator="b"),
        )
        refusals_are_kernel_errors(outcomes)
        assert [o.ok for o in outcomes] == [True, True], outcomes
        assert sorted(o.value[1] for o in outcomes) == [False, True], (i, outcomes)
        disabled = [e for e in kernel.events(job_id=job_id) if e.type == "job_disabled"]
        assert len(disabled) == 1, (i, disabled)
        assert not kernel.get_job(job_id).enabled


def test_exclusive_runs_start_in_order_whichever_claim_comes_first(
    pair: tuple[Kernel, Actors, bool],
) -> None:
    """Two workers claim a queue job's two waiting runs at once, each holding the hint of
    one: the earlier always starts, the later never does while the earlier could."""
    kernel, actors, postgres = pair
    for i in range(race_rounds(postgres, 40)):
        job_id = f"queue-{i}"
        kernel.define_job({**_spec(job_id), "overlap": "queue"})
        earlier, later = (
            kernel.run_now(job_id, request_id=f"{job_id}-{n}", operator="ops").occurrence.id
            for n in (1, 2)
        )
        took_later, took_earlier = actors.run(
            lambda k, o=later: k.claim(o, owner="w-later"),
            lambda k, o=earlier: k.claim(o, owner="w-earlier"),
        )
        refusals_are_kernel_errors([took_later, took_earlier])
        assert took_later.ok and took_later.value is None, (i, took_later)
        assert took_earlier.ok and took_earlier.value is not None, (i, took_earlier)
