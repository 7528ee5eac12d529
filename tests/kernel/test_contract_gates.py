"""Approval gates and run budgets (issue 13 items 1 and 2), on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from kernel.errors import InvalidArgument, StateConflict
from kernel.states import OccurrenceStatus as S
from kernel.store import Kernel
from tests.kernel.interleave import Actors

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness

APPROVAL = {"required": True, "timeout": "10m"}


def fired(k: Harness, job_id: str = "job", n: int = 1) -> list[Any]:
    """Fire ``n`` firings of ``job_id``; return every occurrence made, oldest first."""
    k.fire(job_id, n)
    return sorted(k.kernel.list_occurrences(job_id=job_id, limit=500), key=lambda o: o.id)


# -- approvals ------------------------------------------------------------------------


def test_an_approval_gated_firing_waits_unclaimed_until_approved(k: Harness) -> None:
    k.define(approval=APPROVAL)
    (occ,) = fired(k)
    assert occ.status == S.AWAITING_APPROVAL
    assert k.kernel.claim(occ.id, owner="w1") is None
    assert k.kernel.claim_next(owner="w1") is None
    assert k.kernel.dispatch_batch() == []
    assert k.kernel.status()["counts"]["awaiting_approval"] == 1
    assert [o.id for o in k.kernel.active_occurrences("job")] == [occ.id]

    done = k.kernel.approve(occ.id, request_id="a1", operator="ann", reason="looks fine")
    assert done.occurrence.status == S.QUEUED and not done.deduplicated
    assert [h.occurrence_id for h in k.kernel.dispatch_batch()] == [occ.id]
    approved = k.kernel.events(occurrence_id=occ.id)[-1]
    assert approved.type == "occurrence_approved"
    assert approved.data == {
        "request_id": "a1",
        "operator": "ann",
        "auto": False,
        "reason": "looks fine",
    }
    assert k.kernel.approve(occ.id, request_id="a1", operator="ann").deduplicated
    claim = k.kernel.claim(occ.id, owner="w1")
    assert claim is not None and claim.fence == 1


def test_a_rejected_occurrence_is_skipped_and_cannot_be_approved(k: Harness) -> None:
    k.define(approval=APPROVAL)
    (occ,) = fired(k)
    done = k.kernel.reject(occ.id, request_id="r1", operator="bob")
    assert done.occurrence.status == S.SKIPPED
    assert done.occurrence.skip_reason == "approval_rejected"
    assert done.occurrence.settled_at is not None
    assert k.kernel.reject(occ.id, request_id="r1", operator="bob").deduplicated
    with pytest.raises(StateConflict) as refused:
        k.kernel.approve(occ.id, request_id="a2", operator="bob")
    assert "not awaiting_approval" in refused.value.message
    assert refused.value.details["status"] == "skipped"
    assert k.event_types(occ.id)[-1] == "occurrence_rejected"


def test_approving_or_rejecting_an_occurrence_that_does_not_wait_is_refused(k: Harness) -> None:
    (occ_id,) = k.occurrences()
    for act in (k.kernel.approve, k.kernel.reject):
        with pytest.raises(StateConflict) as refused:
            act(occ_id, request_id=f"{act.__name__}-1", operator="ann")
        assert (
            refused.value.details
            == {
                "occurrence_id": occ_id,
                "status": "queued",
                "request_id": f"{act.__name__}-1",
            }
            or refused.value.details["status"] == "queued"
        )
    assert k.kernel.get_occurrence(occ_id).status == S.QUEUED


@pytest.mark.parametrize(("auto", "status"), [("reject", S.SKIPPED), ("approve", S.QUEUED)])
def test_the_timeout_applies_the_auto_action(k: Harness, auto: str, status: S) -> None:
    k.define(approval={**APPROVAL, "auto": auto})
    (occ,) = fired(k)
    k.clock.advance(599)
    assert k.kernel.apply_approval_timeouts() == {"approved": 0, "rejected": 0}
    k.clock.advance(1)
    expected = {"approved": int(auto == "approve"), "rejected": int(auto == "reject")}
    assert k.kernel.apply_approval_timeouts() == expected
    after = k.kernel.get_occurrence(occ.id)
    assert after.status == status
    assert after.skip_reason == (None if auto == "approve" else "approval_timeout")
    last = k.kernel.events(occurrence_id=occ.id)[-1]
    assert last.type == ("occurrence_approved" if auto == "approve" else "occurrence_rejected")
    assert last.data == {"auto": True, "reason": "approval_timeout"}
    with pytest.raises(StateConflict):
        k.kernel.approve(occ.id, request_id="late", operator="ann")


def test_max_pending_skips_firings_beyond_it(k: Harness) -> None:
    k.define(approval={**APPROVAL, "max_pending": 2})
    made = fired(k, n=3)
    assert [o.status for o in made] == [S.AWAITING_APPROVAL, S.AWAITING_APPROVAL, S.SKIPPED]
    assert made[2].skip_reason == "approval_backlog"
    k.kernel.reject(made[0].id, request_id="r", operator="ann")
    assert fired(k)[-1].status == S.AWAITING_APPROVAL


def test_an_awaiting_occurrence_can_be_cancelled_and_counts_in_the_backlog(k: Harness) -> None:
    k.define(approval=APPROVAL, overlap="queue", max_queued=1)
    first, second, third = fired(k, n=3)
    assert (first.status, second.status) == (S.AWAITING_APPROVAL, S.AWAITING_APPROVAL)
    assert third.status == S.SKIPPED and third.skip_reason == "queue_full"
    done = k.kernel.cancel(first.id, request_id="c", operator="ann")
    assert done.occurrence.status == S.CANCELLED


def test_run_now_is_not_held_and_a_chained_child_is(k: Harness) -> None:
    k.define(approval=APPROVAL)
    manual = k.kernel.run_now("job", request_id="now", operator="ann")
    assert manual.occurrence.status == S.QUEUED
    k.define("child", approval=APPROVAL, after={"job": "job"})
    claim = k.kernel.claim(manual.occurrence.id, owner="w1")
    assert claim is not None
    k.kernel.succeed(claim.occurrence.id, owner="w1", fence=claim.fence)
    (child,) = k.kernel.list_occurrences(job_id="child")
    assert child.status == S.AWAITING_APPROVAL


def test_an_approval_section_is_validated(k: Harness) -> None:
    for bad, field in [
        ({"required": "yes"}, "approval.required"),
        ({"auto": "maybe"}, "approval.auto"),
        ({"max_pending": 0}, "approval.max_pending"),
        ({"timeout": "0s"}, "approval.timeout"),
        ({"when": 1}, "approval.when"),
    ]:
        with pytest.raises(InvalidArgument) as refused:
            k.define(approval=bad)
        assert refused.value.details["field"] == field, bad
    job = k.define(approval={"required": False})
    assert "approval" not in job.spec


# -- budgets -----------------------------------------------------------------------------


def test_a_job_budget_skips_firings_beyond_max_runs_until_the_next_window(k: Harness) -> None:
    k.clock.ms = 1_800_000_000_000  # 2027-01-15T08:00Z, a whole hour
    k.define(budget={"window": "1h", "max_runs": 2})
    made = fired(k, n=3)
    assert [o.status for o in made] == [S.QUEUED, S.QUEUED, S.SKIPPED]
    assert made[2].skip_reason == "budget"
    created = k.kernel.events(occurrence_id=made[0].id)[0]
    assert created.data["budget"] == "job:job"
    (usage,) = k.kernel.list_budgets()
    assert (usage["name"], usage["runs"], usage["units"]) == ("job:job", 2, 2)
    k.clock.advance(3600)
    assert fired(k)[-1].status == S.QUEUED


def test_a_reservation_is_released_when_the_occurrence_never_ran(k: Harness) -> None:
    k.define(budget={"window": "1h", "max_runs": 1}, approval=APPROVAL)
    (first,) = fired(k)
    assert fired(k)[-1].skip_reason == "budget"
    k.kernel.reject(first.id, request_id="r", operator="ann")
    assert k.event_types(first.id)[-1] == "budget_released"
    third = fired(k)[-1]
    assert third.status == S.AWAITING_APPROVAL
    k.kernel.cancel(third.id, request_id="c", operator="ann")
    assert k.kernel.list_budgets()[0]["runs"] == 0


def test_a_run_that_ran_keeps_its_reservation_and_reports_units(k: Harness) -> None:
    k.clock.ms = 1_800_000_000_000
    k.define(budget={"window": "1h", "max_units": 10})
    claim = k.running()
    k.kernel.succeed(claim.occurrence.id, owner="w1", fence=claim.fence, result={"budget_units": 9})
    assert k.kernel.list_budgets()[0]["units"] == 9
    assert fired(k)[-1].status == S.QUEUED  # 9 + 1 <= 10
    assert fired(k)[-1].skip_reason == "budget"


def test_shared_budgets_come_from_set_budgets_and_must_exist(k: Harness) -> None:
    with pytest.raises(InvalidArgument) as undefined:
        k.define(budget="team")
    assert undefined.value.details["field"] == "budget"
    assert "budgets:" in undefined.value.message
    assert k.kernel.set_budgets({"team": {"window": "1d", "max_runs": 2}}) == ["team"]
    k.define("a", budget="team")
    k.define("b", budget="team")
    statuses = [o.status for o in fired(k, "a", 1) + fired(k, "b", 2)]
    assert statuses == [S.QUEUED, S.QUEUED, S.SKIPPED]
    (team,) = k.kernel.list_budgets()
    assert team["shared"] and team["max_runs"] == 2 and team["runs"] == 2
    with pytest.raises(InvalidArgument) as bad:
        k.kernel.set_budgets({"team": {"window": "10s", "max_runs": 1}})
    assert bad.value.details["field"] == "budgets.team.window"


def test_a_budget_section_is_validated(k: Harness) -> None:
    for bad, field in [
        ({"window": "1h"}, "budget"),
        ({"max_runs": 0}, "budget.max_runs"),
        ({"max_units": "x"}, "budget.max_units"),
        ({"window": "32d", "max_runs": 1}, "budget.window"),
        ({"max_runs": 1, "other": 2}, "budget.other"),
    ]:
        with pytest.raises(InvalidArgument) as refused:
            k.define(budget=bad)
        assert refused.value.details["field"] == field, bad
    job = k.define(budget={"max_runs": 5})
    assert job.spec["budget"] == {"window": 86400.0, "max_runs": 5, "max_units": None}


def test_two_beats_firing_at_once_never_exceed_a_shared_budget(k: Harness) -> None:
    limit, jobs = 3, 6
    k.kernel.set_budgets({"shared": {"window": "1d", "max_runs": limit}})
    for n in range(jobs):
        k.define(f"j{n}", budget="shared")
    revisions = [k.kernel.get_job(f"j{n}").revision for n in range(jobs)]
    key, now = k.cron_key(k.clock.now), k.clock.now
    actors = Actors(k.url, [k.clock] * jobs)
    try:
        outcomes = actors.run(
            *(
                lambda kernel, n=n: kernel.fire(
                    f"j{n}",
                    expected_revision=revisions[n],
                    expected_cursor=None,
                    firings=[(key, now)],
                    next_cursor=None,
                )
                for n in range(jobs)
            )
        )
    finally:
        actors.close()
    assert all(o.ok for o in outcomes), outcomes
    made = [o for n in range(jobs) for o in k.kernel.list_occurrences(job_id=f"j{n}")]
    assert len(made) == jobs
    assert sum(o.status == S.QUEUED for o in made) == limit
    assert {o.skip_reason for o in made if o.status == S.SKIPPED} == {"budget"}
    assert k.kernel.list_budgets()[0]["runs"] == limit


def test_pruning_a_counted_run_keeps_its_window_count(k: Harness) -> None:
    k.clock.ms = 1_800_000_000_000
    k.define(budget={"window": "1d", "max_runs": 1})
    claim = k.running()
    k.kernel.succeed(claim.occurrence.id, owner="w1", fence=claim.fence)
    k.clock.advance(60)
    assert k.kernel.prune(older_than=timedelta(seconds=1))["occurrences"] == 1
    assert k.kernel.list_budgets()[0]["runs"] == 1
    assert fired(k)[-1].skip_reason == "budget"


def test_two_beats_applying_approval_timeouts_decide_each_once(k: Harness) -> None:
    k.define(
        approval={**APPROVAL, "auto": "reject", "max_pending": 100},
        budget={"window": "1d", "max_runs": 50},
        max_queued=100,  # awaiting approval is backlog too
    )
    made = fired(k, n=40)
    k.clock.advance(600)
    decided: list[dict[str, int]] = []

    def beat(kernel: Kernel) -> None:
        while True:
            got = kernel.apply_approval_timeouts(limit=7)
            decided.append(got)
            if not any(got.values()):
                return

    actors = Actors(k.url, [k.clock] * 2)
    try:
        outcomes = actors.run(beat, beat)
    finally:
        actors.close()
    assert all(o.ok for o in outcomes), outcomes
    assert sum(d["rejected"] for d in decided) == len(made)
    for occ in made:
        assert k.kernel.get_occurrence(occ.id).skip_reason == "approval_timeout"
        assert k.event_types(occ.id).count("occurrence_rejected") == 1
        assert k.event_types(occ.id).count("budget_released") == 1
    assert k.kernel.list_budgets()[0]["runs"] == 0
