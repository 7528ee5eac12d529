"""Job health: last success, last failure, consecutive failures and next firing, one query."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import sqlalchemy as sa

from kernel.jobs.health import job_health_query

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness


def _settle(k: Harness, job: str, *, succeed: bool, retryable: bool = False) -> None:
    claim = k.running(job)
    occ = claim.occurrence.id
    if succeed:
        k.kernel.succeed(occ, owner="w1", fence=claim.fence)
    else:
        k.kernel.fail(
            occ, owner="w1", fence=claim.fence, code="BOOM", message="x", retryable=retryable
        )
    k.clock.advance(60)


def test_health_counts_dead_letters_since_the_last_success(k: Harness) -> None:
    k.define("flaky")
    k.define("fine")
    k.define("idle", schedule={"every": "1h"})
    _settle(k, "flaky", succeed=False)
    _settle(k, "flaky", succeed=True)
    succeeded_at = k.clock.now - timedelta(minutes=1)
    _settle(k, "flaky", succeed=False)
    _settle(k, "flaky", succeed=False)
    failed_at = k.clock.now - timedelta(minutes=1)
    _settle(k, "flaky", succeed=False, retryable=True)  # retried: not a failure yet
    _settle(k, "fine", succeed=True)

    health = k.kernel.job_health()
    assert sorted(health) == ["fine", "flaky", "idle"]
    flaky = health["flaky"]
    assert flaky.last_success_at == succeeded_at
    assert flaky.last_failure_at == failed_at
    assert flaky.consecutive_failures == 2
    assert health["fine"].consecutive_failures == 0
    assert health["fine"].last_failure_at is None
    idle = health["idle"].to_dict()
    assert idle["last_success_at"] is None and idle["consecutive_failures"] == 0
    assert idle["next_fire_at"] == k.kernel.get_job("idle").to_dict()["next_fire_at"]


def test_health_of_one_job_and_of_a_disabled_or_unknown_one(k: Harness) -> None:
    k.define("never-succeeded", schedule={"every": "1h"})
    _settle(k, "never-succeeded", succeed=False)
    _settle(k, "never-succeeded", succeed=False)
    [only] = k.kernel.job_health("never-succeeded").values()
    assert only.consecutive_failures == 2
    assert only.next_fire_at is not None
    k.kernel.set_job_enabled("never-succeeded", False)
    assert k.kernel.job_health("never-succeeded")["never-succeeded"].next_fire_at is None
    assert k.kernel.job_health("nope") == {}


def test_health_seeks_the_job_index_rather_than_scanning_history(k: Harness) -> None:
    query = job_health_query().compile(k.kernel.engine, compile_kwargs={"literal_binds": True})
    with k.kernel.engine.begin() as conn:
        if k.backend == "sqlite":
            rows = conn.execute(sa.text(f"EXPLAIN QUERY PLAN {query}"))
            plan = " | ".join(r[-1] for r in rows)
            assert "SCAN occurrences" not in plan and "SCAN settled" not in plan, plan
        else:  # the planner scans tables this small: ask whether the index can serve
            conn.execute(sa.text("SET LOCAL enable_seqscan = off"))
            plan = " | ".join(r[0] for r in conn.execute(sa.text(f"EXPLAIN {query}")))
            assert "Seq Scan on occurrences" not in plan, plan
    # Last success (twice: itself and the bound of the count), last failure, the count:
    # each a seek by job and status on the one index that leads with both.
    assert plan.count("occurrences_job") == 4, plan
