"""Admission (max_queued for every way an occurrence is made, run-now under the overlap
policy) and chain bounds (failure conditions, fan-out, depth)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kernel.errors import InvalidArgument, RevisionConflict, StateConflict
from kernel.states import OccurrenceStatus as S

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness


def run_now(k: Harness, rid: str, job: str = "job", force: bool = False) -> int:
    return k.kernel.run_now(job, request_id=rid, operator="op", force=force).occurrence.id


@pytest.mark.parametrize("overlap", ["allow", "queue"])
def test_max_queued_bounds_firings_and_run_now_under_every_policy(k: Harness, overlap: str) -> None:
    k.define("job", overlap=overlap, max_queued=2)
    # Under queue the first waiting one runs next: two more may wait behind it.
    admitted = 2 + (overlap == "queue")
    report = k.fire("job", admitted + 1)
    assert len(report.created) == admitted and [r for _, r in report.skipped] == ["queue_full"]
    with pytest.raises(StateConflict) as refused:
        run_now(k, "r1")
    assert refused.value.details["reason"] == "queue_full"
    assert "--force" in str(refused.value)
    forced = run_now(k, "r2", force=True)
    assert k.kernel.get_occurrence(forced).status == S.QUEUED
    assert k.kernel.events(occurrence_id=forced)[-1].data.get("force") is True
    # A refused run-now recorded nothing: its request id is free to retry.
    k.kernel.cancel(report.created[0], request_id="c1", operator="op")
    k.kernel.cancel(forced, request_id="c2", operator="op")
    assert k.kernel.get_occurrence(run_now(k, "r1")).status == S.QUEUED


def test_run_now_follows_overlap_skip_unless_forced(k: Harness) -> None:
    claim = k.running("job", overlap="skip")
    with pytest.raises(StateConflict) as refused:
        run_now(k, "r1")
    assert refused.value.details == {
        "job_id": "job",
        "reason": "overlap",
        "active": [claim.occurrence.id],
    }
    assert k.kernel.get_occurrence(run_now(k, "r2", force=True)).status == S.QUEUED


def test_run_now_under_replace_cancels_the_active_run(k: Harness) -> None:
    claim = k.running("job", overlap="replace")
    made = run_now(k, "r1")
    assert k.kernel.get_occurrence(claim.occurrence.id).cancel_requested
    assert k.kernel.get_occurrence(made).status == S.QUEUED


def test_a_run_now_replay_after_a_revision_is_refused_naming_the_first_occurrence(
    k: Harness,
) -> None:
    job = k.define("job")
    first = run_now(k, "r1")
    assert k.kernel.run_now("job", request_id="r1", operator="op").deduplicated
    k.kernel.revise_job({**job.spec, "max_attempts": 5}, expected_revision=job.revision)
    with pytest.raises(RevisionConflict) as refused:
        run_now(k, "r1")
    assert refused.value.details["occurrence_id"] == first
    assert f"occurrence {first}" in str(refused.value)
    assert len(k.kernel.list_occurrences(job_id="job")) == 1


def test_a_chained_child_is_admitted_like_any_occurrence(k: Harness) -> None:
    k.define("parent")
    k.define("child", after={"job": "parent"}, max_queued=1)
    for _ in range(2):
        claim = k.running("parent")
        k.kernel.succeed(claim.occurrence.id, owner="w1", fence=claim.fence)
    made = k.kernel.list_occurrences(job_id="child")
    assert sorted((o.status, o.skip_reason) for o in made) == [
        (S.QUEUED, None),
        (S.SKIPPED, "queue_full"),
    ]


def test_a_failure_condition_matches_the_error_text(k: Harness) -> None:
    k.define("parent")
    k.define("on-timeout", after={"job": "parent", "on": "failure", "condition": "regex:^TIMEOUT"})
    k.define("on-disk", after={"job": "parent", "on": "failure", "condition": "contains:disk"})
    claim = k.running("parent")
    k.kernel.fail(
        claim.occurrence.id,
        owner="w1",
        fence=claim.fence,
        code="TIMEOUT",
        message="took too long",
        retryable=False,
    )
    assert len(k.kernel.list_occurrences(job_id="on-timeout")) == 1
    assert k.kernel.list_occurrences(job_id="on-disk") == []


def test_fan_out_is_bounded_per_parent_by_after_fanout(k: Harness) -> None:
    k.define("parent")
    for n in range(3):
        k.define(f"child-{n}", after={"job": "parent", "fanout": 3})
    with pytest.raises(InvalidArgument) as refused:
        k.define("child-3", after={"job": "parent", "fanout": 3})
    assert refused.value.details["field"] == "after.job" and "fan-out bound of 3" in str(
        refused.value
    )
    # A child declaring a smaller bound is refused when the parent already has more.
    with pytest.raises(InvalidArgument):
        k.define("child-x", after={"job": "parent", "fanout": 2})
    job = k.kernel.get_job("child-0")
    assert job.spec["after"]["fanout"] == 3
    assert "fanout" not in k.define("other", after={"job": "child-0"}).spec["after"]
    claim = k.running("parent")
    k.kernel.succeed(claim.occurrence.id, owner="w1", fence=claim.fence)
    assert all(len(k.kernel.list_occurrences(job_id=f"child-{n}")) == 1 for n in range(3))


def test_the_default_fan_out_is_25(k: Harness) -> None:
    k.define("parent")
    for n in range(25):
        k.define(f"child-{n:02d}", after={"job": "parent"})
    with pytest.raises(InvalidArgument):
        k.define("child-25", after={"job": "parent"})


def test_a_chain_of_10_jobs_is_allowed_and_11_refused_and_each_level_fires(k: Harness) -> None:
    k.define("level-1")
    for n in range(2, 11):
        k.define(f"level-{n}", after={"job": f"level-{n - 1}"})
    with pytest.raises(InvalidArgument) as refused:
        k.define("level-11", after={"job": "level-10"})
    assert "deeper than 10" in str(refused.value)
    claim = k.running("level-1")
    k.kernel.succeed(claim.occurrence.id, owner="w1", fence=claim.fence)
    parent = claim.occurrence.id
    for n in range(2, 11):
        [occ] = k.kernel.list_occurrences(job_id=f"level-{n}")
        assert occ.trigger_key == f"chain:{parent}"
        parent = occ.id
        got = k.kernel.claim(occ.id, owner="w1", lease=30)
        assert got is not None
        k.kernel.succeed(occ.id, owner="w1", fence=got.fence)
    assert not [e for e in k.kernel.events(limit=1000) if e.type == "chain_depth_exceeded"]
