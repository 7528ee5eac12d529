"""Session 3's transitions raced two at a time (issues 8 and 13): approvals, job cancel,
budgets and admission.

Each round stages what it starts from through the public API, races two actors on it
(:mod:`race_world`; every other round on PostgreSQL holds the occurrence's row until
both have read) and checks, whatever order the writes landed in: the answers are those of
some serial order, every refusal is a KernelError with a code, every occurrence of the
jobs involved is settled or movable with an event log naming its status, an accepted
cancel ends ``cancelled``, and pool and budget counters equal the rows they count and
stay within their limits. 20 rounds on PostgreSQL, 5 on SQLite (``KERNEL_RACE_ROUNDS``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kernel.store import Kernel
from tests.kernel.interleave import LEASE_S, Outcome, job_spec
from tests.kernel.race_world import World, world, world_factory

#: The race fixtures this module's tests take (imported, so listed as used).
__all__ = ["world", "world_factory"]

ROUNDS = 20
#: A budget wide enough never to refuse: the reservations exist, so their counters are checked.
ROOMY_BUDGET = {"window": "1d", "max_runs": 100_000}


def _gated(world: World, job_id: str, auto: str = "reject") -> int:
    """A new firing of an approval-gated, budgeted job: the occurrence awaiting approval."""
    if job_id not in {j.id for j in world.stage.kernel.list_jobs()}:
        approval = {"required": True, "timeout": "10m", "auto": auto, "max_pending": 1000}
        spec = job_spec(job_id, approval=approval, budget=ROOMY_BUDGET)
        world.stage.kernel.define_job(spec)
    report = world.stage.firing(job_id)(world.stage.kernel)
    (occ,) = report.created
    assert world.status(occ) == "awaiting_approval"
    return occ


def _refused(outcome: Outcome, code: str, where: str) -> None:
    assert not outcome.ok and outcome.code == code, f"{where}: {outcome}"


def _events(world: World, occ: int, *types: str) -> list[str]:
    return [t for t, _ in world.state(occ)["events"] if t in types]


# -- approvals -------------------------------------------------------------------------------


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_approval_decision_vs_cancel(world: World, decision: str) -> None:
    """The cancel is always accepted when it comes first; after an approval it cancels the
    queued run; after a rejection (skipped) it is refused. One budget release at most."""

    def round_(i: int) -> None:
        occ = _gated(world, "gated")
        rid_d, rid_c = world.stage.next_id(decision), world.stage.next_id("cancel")
        decide = getattr(Kernel, decision)
        decided, cancelled = world.race(
            i,
            lambda k: decide(k, occ, request_id=rid_d, operator="op"),
            lambda k: k.cancel(occ, request_id=rid_c, operator="op"),
            hold=occ,
        )
        status = world.check_job("gated", since=occ)[occ]
        where = f"round {i}: {decision} {decided}, cancel {cancelled}"
        if decision == "approve":
            assert cancelled.ok and status == "cancelled", where
            if not decided.ok:
                _refused(decided, "STATE_CONFLICT", where)
        else:
            assert decided.ok != cancelled.ok, where
            _refused(cancelled if decided.ok else decided, "STATE_CONFLICT", where)
            assert status == ("skipped" if decided.ok else "cancelled"), where
        assert len(_events(world, occ, "budget_released")) == 1, where

    world.repeat(round_, rounds=ROUNDS)


@pytest.mark.parametrize("auto", ["approve", "reject"])
def test_approve_vs_approval_timeout(world: World, auto: str) -> None:
    """An operator's approval races Beat's pass over approvals past their timeout: one
    decides, once; the other finds nothing to decide."""

    def round_(i: int) -> None:
        occ = _gated(world, f"gated-{auto}", auto)
        world.clock.advance(601)
        rid = world.stage.next_id("approve")
        approved, timed_out = world.race(
            i,
            lambda k: k.approve(occ, request_id=rid, operator="op"),
            lambda k: k.apply_approval_timeouts(),
            hold=occ,
        )
        where = f"round {i}: approve {approved}, timeouts {timed_out}"
        assert timed_out.ok, where
        applied = sum(timed_out.value.values())
        assert approved.ok != (applied == 1), where
        if not approved.ok:
            _refused(approved, "STATE_CONFLICT", where)
        status = world.check_job(f"gated-{auto}", since=occ)[occ]
        wanted = "skipped" if not approved.ok and auto == "reject" else "queued"
        assert status == wanted, where
        decisions = _events(world, occ, "occurrence_approved", "occurrence_rejected")
        assert len(decisions) == 1, where
        if status == "queued":
            world.stage.kernel.cancel(occ, request_id=world.stage.next_id("c"), operator="op")

    world.repeat(round_, rounds=ROUNDS)


def test_two_approves_under_two_request_ids(world: World) -> None:
    """One approval queues the occurrence; the other is refused, STATE_CONFLICT."""

    def round_(i: int) -> None:
        occ = _gated(world, "gated")
        rids = [world.stage.next_id("approve") for _ in range(2)]
        outcomes = world.race(
            i, *[lambda k, r=r: k.approve(occ, request_id=r, operator="op") for r in rids], hold=occ
        )
        assert [o.ok for o in outcomes].count(True) == 1, f"round {i}: {outcomes}"
        _refused(next(o for o in outcomes if not o.ok), "STATE_CONFLICT", f"round {i}")
        assert world.check_job("gated", since=occ)[occ] == "queued"
        assert len(_events(world, occ, "occurrence_approved")) == 1
        world.stage.kernel.cancel(occ, request_id=world.stage.next_id("c"), operator="op")

    world.repeat(round_, rounds=ROUNDS)


# -- jobs cancel --cascade -------------------------------------------------------------------


def _chain(world: World, i: int) -> tuple[str, str]:
    """A parent job and a child chained after it (on success), both new."""
    parent, child = f"parent-{i}", f"child-{i}"
    world.stage.kernel.define_job(job_spec(parent))
    world.stage.kernel.define_job(job_spec(child, after={"job": parent}))
    return parent, child


def _cancel_tree(world: World, parent: str) -> Callable[[Kernel], Any]:
    rid = world.stage.next_id("cancel-job")
    return lambda k: k.cancel_job(parent, cascade=True, request_id=rid, operator="op")


def _nothing_waits(world: World, *job_ids: str) -> None:
    """The cancelled tree: every job disabled, none of its occurrences waiting or running."""
    for job_id in job_ids:
        assert not world.stage.kernel.get_job(job_id).enabled, job_id
        statuses = world.check_job(job_id)
        live = {o: s for o, s in statuses.items() if s in ("queued", "retry_wait", "running")}
        assert not live, f"{job_id}: {live} after the job cancel"


def test_job_cancel_vs_an_occurrence_cancel(world: World) -> None:
    """One of them cancels the waiting occurrence and only that one says so: the job
    cancel lists it as cancelled, or the occurrence cancel is accepted and the job cancel
    does not list it; one ``occurrence_cancelled`` event either way."""

    def round_(i: int) -> None:
        parent, _ = _chain(world, i)
        (occ,) = world.stage.fresh(parent)
        rid = world.stage.next_id("cancel")
        by_job, by_occurrence = world.race(
            i,
            _cancel_tree(world, parent),
            lambda k: k.cancel(occ, request_id=rid, operator="op"),
            hold=occ,
        )
        where = f"round {i}: job cancel {by_job}, cancel {by_occurrence}"
        assert by_job.ok, where
        if by_occurrence.ok:
            assert by_job.value.cancelled == (), where
        else:
            _refused(by_occurrence, "STATE_CONFLICT", where)
            assert by_job.value.cancelled == (occ,), where
        assert len(_events(world, occ, "occurrence_cancelled")) == 1, where
        _nothing_waits(world, parent)

    world.repeat(round_, rounds=ROUNDS)


def test_job_cancel_cascade_vs_claim_of_a_child_run(world: World) -> None:
    """Claim first: the child's run is asked to stop and its holder ends it cancelled.
    Cancel first: the child's run is cancelled waiting and the claim takes nothing."""

    def round_(i: int) -> None:
        parent, child = _chain(world, i)
        claim = world.stage.running(parent)
        world.stage.kernel.succeed(claim.occurrence.id, owner=claim.owner, fence=claim.fence)
        (child_occ,) = world.check_job(child)
        cancelled, claimed = world.race(
            i,
            _cancel_tree(world, parent),
            lambda k: k.claim(child_occ, owner="w2", lease=LEASE_S),
            hold=child_occ,
        )
        where = f"round {i}: cancel {cancelled}, claim {claimed}"
        assert cancelled.ok and claimed.ok, where
        if claimed.value is not None:
            assert cancelled.value.stopping == (child_occ,), where
            answer = world.stage.kernel.renew(child_occ, owner="w2", fence=1, lease=LEASE_S)
            assert answer.cancel_requested, where
            world.stage.kernel.cancelled(child_occ, owner="w2", fence=1)
        else:
            assert cancelled.value.cancelled == (child_occ,), where
        assert world.status(child_occ) == "cancelled", where
        _nothing_waits(world, parent, child)

    world.repeat(round_, rounds=ROUNDS)


def test_job_cancel_cascade_vs_a_firing(world: World) -> None:
    """Firing first: the job cancel finds its occurrence and cancels it. Cancel first: the
    disabled job's cursor is gone, so the firing is stale and makes nothing."""

    def round_(i: int) -> None:
        parent, child = _chain(world, i)
        cancelled, fired = world.race(
            i, _cancel_tree(world, parent), world.stage.firing(parent), hold=None
        )
        where = f"round {i}: cancel {cancelled}, fire {fired}"
        assert cancelled.ok and fired.ok, where
        if fired.value.stale:
            assert cancelled.value.cancelled == (), where
        else:
            assert cancelled.value.cancelled == fired.value.created, where
        _nothing_waits(world, parent, child)

    world.repeat(round_, rounds=ROUNDS)


@pytest.mark.parametrize("settle", ["succeed", "retryable_failure"])
def test_job_cancel_cascade_vs_settle_of_the_running_parent(world: World, settle: str) -> None:
    """The parent's run settles as the tree is cancelled: a success fires the child only if
    it lands first (the cascade then cancels the child's run); a retryable failure ends
    cancelled when the cancel landed first (it then asks nothing more), else retry_wait
    and then cancelled by the cascade."""

    def round_(i: int) -> None:
        parent, child = _chain(world, i)
        claim = world.stage.running(parent)
        occ, owner, fence = claim.occurrence.id, claim.owner, claim.fence

        def settle_run(k: Kernel) -> Any:
            if settle == "succeed":
                return k.succeed(occ, owner=owner, fence=fence)
            return k.fail(occ, owner=owner, fence=fence, code="BOOM", message="m", retryable=True)

        cancelled, settled = world.race(i, _cancel_tree(world, parent), settle_run, hold=occ)
        where = f"round {i}: cancel {cancelled}, {settle} {settled}"
        assert cancelled.ok and settled.ok, where
        status = world.status(occ)
        if settle == "succeed":
            assert status in ("succeeded", "cancelled"), where
        else:
            assert status == "cancelled", where
        _nothing_waits(world, parent, child)

    world.repeat(round_, rounds=ROUNDS)


# -- budgets and admission -------------------------------------------------------------------


@pytest.mark.parametrize("second", ["fire", "run_now"])
def test_two_firings_for_the_last_run_of_a_shared_budget(world: World, second: str) -> None:
    """Two jobs share a budget with one run left: one firing (or run-now) is queued, the
    other skipped with reason ``budget``; the window counts exactly its reservations.
    Odd rounds start from a window no firing opened yet (both race to make its row)."""

    def round_(i: int) -> None:
        budget, a, b = f"team-{i}", f"a-{i}", f"b-{i}"
        world.stage.kernel.set_budgets({budget: {"window": "1d", "max_runs": 2 - i % 2}})
        for job_id in (a, b):
            world.stage.kernel.define_job(job_spec(job_id, budget=budget))
        if i % 2 == 0:
            world.stage.fresh(a)  # the first of the two runs
        rid = world.stage.next_id("run-now")
        other = (
            world.stage.firing(b)
            if second == "fire"
            else lambda k: k.run_now(b, request_id=rid, operator="op")
        )
        first, made = world.race(i, world.stage.firing(a), other, hold=None)
        where = f"round {i}: fire {first}, {second} {made}"
        assert first.ok and made.ok, where
        statuses = sorted(
            s for job_id in (a, b) for o, s in world.check_job(job_id).items() if o is not None
        )
        assert statuses == ["queued"] * (2 - i % 2) + ["skipped"], where
        skipped = [
            o
            for job_id in (a, b)
            for o in world.stage.kernel.list_occurrences(job_id=job_id)
            if o.status == "skipped"
        ]
        assert [o.skip_reason for o in skipped] == ["budget"], where

    world.repeat(round_, rounds=ROUNDS)


def test_run_now_vs_a_firing_with_room_for_one(world: World) -> None:
    """``max_queued`` 1 and nothing waiting: of a run-now and a firing at once, one is
    queued; the run-now is refused (queue_full) or the firing is skipped (queue_full)."""
    world.stage.kernel.define_job(job_spec("one-slot", max_queued=1))

    def round_(i: int) -> None:
        newest = world.stage.kernel.list_occurrences(job_id="one-slot", limit=1)
        since = newest[0].id + 1 if newest else 0
        rid = world.stage.next_id("run-now")
        ran, fired = world.race(
            i,
            lambda k: k.run_now("one-slot", request_id=rid, operator="op"),
            world.stage.firing("one-slot"),
            hold=None,
        )
        where = f"round {i}: run-now {ran}, fire {fired}"
        assert fired.ok and not fired.value.stale, where
        if ran.ok:
            assert fired.value.created == () and len(fired.value.skipped) == 1, where
            assert fired.value.skipped[0][1] == "queue_full", where
        else:
            _refused(ran, "STATE_CONFLICT", where)
            assert ran.refusal is not None and ran.refusal.details["reason"] == "queue_full"
            assert len(fired.value.created) == 1, where
        waiting = [o for o, s in world.check_job("one-slot", since).items() if s == "queued"]
        assert len(waiting) == 1, where
        world.stage.kernel.cancel(waiting[0], request_id=world.stage.next_id("c"), operator="op")

    world.repeat(round_, rounds=ROUNDS)


def test_job_cancel_of_a_child_vs_its_parent_settling(world: World) -> None:
    """The child job alone is cancelled as its parent's run succeeds: the parent's chain
    fires the child only if the settle came first (the cancel then cancels that run); a
    child disabled first gets no run."""

    def round_(i: int) -> None:
        parent, child = _chain(world, i)
        claim = world.stage.running(parent)
        occ, owner, fence = claim.occurrence.id, claim.owner, claim.fence
        rid = world.stage.next_id("cancel-job")
        cancelled, settled = world.race(
            i,
            lambda k: k.cancel_job(child, request_id=rid, operator="op"),
            lambda k: k.succeed(occ, owner=owner, fence=fence),
            hold=None,
        )
        where = f"round {i}: cancel {cancelled}, succeed {settled}"
        assert cancelled.ok and settled.ok, where
        assert world.status(occ) == "succeeded", where
        _nothing_waits(world, child)

    world.repeat(round_, rounds=ROUNDS)
