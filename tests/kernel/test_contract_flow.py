"""Chains, resource pools and overlap policies (SPEC §6)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from kernel.errors import InvalidArgument
from kernel.states import OccurrenceStatus as S

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness


def children(k: Harness, job_id: str = "child") -> list[Any]:
    return k.kernel.list_occurrences(job_id=job_id)


def settle_parent(k: Harness, parent: str = "parent", *, succeed: bool, result: Any = None) -> int:
    claim = k.running(parent)
    occ_id = claim.occurrence.id
    if succeed:
        k.kernel.succeed(occ_id, owner="w1", fence=claim.fence, result=result)
    else:
        k.kernel.fail(
            occ_id, owner="w1", fence=claim.fence, code="BOOM", message="no", retryable=False
        )
    return occ_id


def test_a_child_fires_on_its_parents_outcome(k: Harness) -> None:
    cases = [
        ("success", True, True),
        ("success", False, False),
        ("failure", True, False),
        ("failure", False, True),
        ("complete", True, True),
        ("complete", False, True),
    ]
    for n, (on, succeed, fires) in enumerate(cases):
        k.define(f"parent-{n}")
        k.define(f"child-{n}", after={"job": f"parent-{n}", "on": on})
        parent = settle_parent(k, f"parent-{n}", succeed=succeed)
        made = children(k, f"child-{n}")
        assert len(made) == int(fires), (on, succeed)
        if fires:
            child = made[0]
            assert child.trigger_key == f"chain:{parent}" and child.status == S.QUEUED
            created = k.kernel.events(occurrence_id=child.id)[0]
            assert created.type == "occurrence_created" and created.data["parent_id"] == parent


def test_a_retry_is_not_an_outcome_but_a_lease_expiry_dead_letter_is(k: Harness) -> None:
    k.define("parent", max_attempts=2, max_lost_leases=0)
    k.define("child", after={"job": "parent", "on": "failure"})
    claim = k.running("parent")
    k.kernel.fail(claim.occurrence.id, owner="w1", fence=1, code="BOOM", message="again")
    assert children(k) == []
    k.clock.advance(10)
    again = k.kernel.claim(claim.occurrence.id, owner="w1", lease=30)
    assert again is not None
    k.clock.advance(30)
    assert k.kernel.expire_leases()["dead_letter"] == 1
    assert [c.trigger_key for c in children(k)] == [f"chain:{claim.occurrence.id}"]


def test_a_condition_matches_the_parents_result_text(k: Harness) -> None:
    cases = [
        ("contains:rows=3", "done rows=3", True),
        ("contains:rows=3", "done rows=4", False),
        ('contains:"ok"', {"status": "ok"}, True),
        ("regex:^done rows=\\d+$", "done rows=12", True),
        ("regex:^done rows=\\d+$", "failed", False),
    ]
    for n, (condition, result, fires) in enumerate(cases):
        k.define(f"parent-{n}")
        k.define(f"child-{n}", after={"job": f"parent-{n}", "condition": condition})
        settle_parent(k, f"parent-{n}", succeed=True, result=result)
        assert len(children(k, f"child-{n}")) == int(fires), (condition, result)


def test_a_delayed_child_waits_for_its_delay(k: Harness) -> None:
    k.define("parent")
    k.define("child", after={"job": "parent", "delay": "5m"})
    settle_parent(k, succeed=True)
    [child] = children(k)
    assert child.available_at == k.clock.now + timedelta(minutes=5)
    assert child.scheduled_for == child.available_at
    k.clock.advance(299)
    assert k.kernel.claim(child.id, owner="w1", lease=30) is None
    assert k.kernel.dispatch_batch() == []
    k.clock.advance(1)
    assert k.kernel.claim(child.id, owner="w1", lease=30) is not None


def test_a_disabled_child_does_not_fire(k: Harness) -> None:
    k.define("parent")
    k.define("child", after={"job": "parent"})
    k.define("dormant", after={"job": "parent"}, enabled=False)
    k.kernel.set_job_enabled("child", False)
    k.kernel.set_job_enabled("dormant", True)
    settle_parent(k, succeed=True)
    assert children(k) == []
    assert len(children(k, "dormant")) == 1


def test_a_chain_cycle_is_refused_when_it_is_defined(k: Harness) -> None:
    k.define("a")
    k.define("b", after={"job": "a"})
    k.define("c", after={"job": "b"})
    with pytest.raises(InvalidArgument) as cycle:
        k.kernel.revise_job(
            {**k.kernel.get_job("a").spec, "after": {"job": "c"}}, expected_revision=1
        )
    assert cycle.value.field == "after.job" and "cycle" in cycle.value.message
    assert k.kernel.get_job("a").revision == 1
    with pytest.raises(InvalidArgument):
        k.define("self", after={"job": "self"})
    # A chain names a parent that exists (issue 13): nothing else can close a loop later.
    with pytest.raises(InvalidArgument) as missing:
        k.define("x", after={"job": "y"})
    assert missing.value.field == "after.job" and "'y' does not exist" in missing.value.message


def test_a_pool_runs_one_occurrence_at_a_time_by_default(k: Harness) -> None:
    first = k.running("a", pool="db")
    [waiting] = k.occurrences("b", pool="db")
    [free] = k.occurrences("c")
    assert k.kernel.claim(waiting, owner="w2", lease=30) is None
    assert k.kernel.claim_next(owner="w2", lease=30, kinds=["callable"]).occurrence.id == free  # type: ignore[union-attr]
    k.kernel.succeed(first.occurrence.id, owner="w1", fence=1)
    got = k.kernel.claim(waiting, owner="w2", lease=30)
    assert got is not None and got.fence == 1


def test_overlap_skip_records_a_skipped_firing_while_one_is_active(k: Harness) -> None:
    k.define("job", overlap="skip")
    report = k.fire("job", 2)
    assert len(report.created) == 1 and [reason for _, reason in report.skipped] == ["overlap"]
    skipped = k.kernel.list_occurrences(job_id="job", statuses=["skipped"])
    assert [o.skip_reason for o in skipped] == ["overlap"]
    assert k.kernel.events(occurrence_id=skipped[0].id)[0].type == "occurrence_skipped"
    claim = k.kernel.claim(report.created[0], owner="w1", lease=30)
    assert claim is not None
    k.kernel.succeed(claim.occurrence.id, owner="w1", fence=1)
    assert len(k.fire("job").created) == 1


def test_overlap_allow_runs_firings_side_by_side(k: Harness) -> None:
    first, second = k.occurrences("job", 2)
    assert k.kernel.claim(first, owner="w1", lease=30) is not None
    assert k.kernel.claim(second, owner="w2", lease=30) is not None


def test_overlap_queue_waits_for_the_running_one_and_bounds_the_queue(k: Harness) -> None:
    k.define("job", overlap="queue", max_queued=2)
    [first] = k.fire("job").created
    assert k.kernel.claim(first, owner="w1", lease=30) is not None
    report = k.fire("job", 3)
    assert len(report.created) == 2 and [r for _, r in report.skipped] == ["queue_full"]
    queued = report.created[0]
    assert k.kernel.claim(queued, owner="w2", lease=30) is None
    k.kernel.succeed(first, owner="w1", fence=1)
    assert k.kernel.claim(queued, owner="w2", lease=30) is not None
    assert k.kernel.claim(report.created[1], owner="w3", lease=30) is None


def test_overlap_replace_cancels_the_active_ones_and_runs_the_new_one(k: Harness) -> None:
    k.define("job", overlap="replace")
    [running] = k.fire("job").created
    assert k.kernel.claim(running, owner="w1", lease=30) is not None
    [newer] = k.fire("job").created
    assert k.kernel.get_occurrence(running).cancel_requested
    assert k.kernel.claim(newer, owner="w2", lease=30) is None
    [newest] = k.fire("job").created
    # The waiting one is replaced at once; the running one was asked already.
    assert k.kernel.get_occurrence(newer).status == S.CANCELLED
    assert k.kernel.renew(running, owner="w1", fence=1, lease=30).cancel_requested
    k.kernel.cancelled(running, owner="w1", fence=1)
    assert k.kernel.claim(newest, owner="w2", lease=30) is not None
    reasons = [
        e.data.get("reason")
        for e in k.kernel.events(job_id="job")
        if e.type in ("occurrence_cancel_requested", "occurrence_cancelled")
    ]
    assert reasons[:2] == ["replaced", "replaced"]
