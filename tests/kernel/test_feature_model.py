"""Model-based test across features (issue 39): features compose without a run stranded,
a bound overrun, a transition unlogged or an unresolved run pruned.

Hypothesis draws jobs with schedule bounds, history limits, overlap policies, at-most-once
and at-least-once delivery, approval gates, a shared pool, ``notify`` and a chained job,
then drives the real kernel on a manual clock with Beat ticks (lease expiry, approval
timeouts, firings planned by Beat's own planner), claims by several owners, settles,
kills (an owner that vanishes, its lease passed by the clock), pauses, resumes, cancels,
run-now, revisions, operator disables, retention and operator verdicts. After every
step the invariants of tests/feature_model.py hold, read from the tables.

CI runs a bounded, derandomized budget on each back end; ``KERNEL_MODEL_EXAMPLES=N``
runs N fresh examples (bench/README.md).
"""

from __future__ import annotations

import os
from collections import defaultdict
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from feature_model import (
    CHAINED,
    LEASE_S,
    POOL,
    SCHEDULED,
    WAITING,
    Snapshot,
    chained_spec,
    created_within_bounds,
    leases_hold,
    new_unresolved,
    notified_once,
    scheduled_spec,
    snapshot,
    transitions_logged,
    unresolved_kept,
    waiting_has_a_blocker,
    wipe,
)
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from celery_app.beat.firings import fire_plan, plan_job
from kernel import Claim, Kernel, KernelError, LeaseLost
from kernel.testing import ManualClock

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness

pytestmark = pytest.mark.long

OWNERS = ("w1", "w2", "w3")
SAFE_POINTS = ("before_execute", "adapter_checkpoint")
#: Refusals an operator may meet on a run that moved meanwhile: not errors of the kernel.
OPERATOR_REFUSALS = {"STATE_CONFLICT", "FENCE_CONFLICT", "PAUSE_UNSUPPORTED"}
#: Retention's ages (seconds) for the prunable statuses, short so that it prunes.
RETENTION = {"succeeded": 60.0, "cancelled": 60.0, "skipped": 60.0}

_FRESH = os.environ.get("KERNEL_MODEL_EXAMPLES")
CI = settings(
    max_examples=int(_FRESH or 40),
    stateful_step_count=50,
    deadline=None,
    derandomize=not _FRESH,
    database=None,
    phases=[Phase.explicit, Phase.generate, Phase.shrink],  # explain's tracer: 10x slower
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class FeatureMachine(RuleBasedStateMachine):
    """The kernel under every feature at once; see the module docstring."""

    url = ""

    def __init__(self) -> None:
        super().__init__()
        wipe(self.url)
        self.clock = ManualClock()
        self.kernel = Kernel.open(self.url, clock=self.clock, check_schema=False)
        self.holders: dict[int, Claim] = {}  # live runs by occurrence
        self.zombies: list[Claim] = []  # runs whose owner vanished
        self.disabled: set[str] = set()  # jobs an operator disabled
        self.made: defaultdict[str, int] = defaultdict(int)  # firings each job's schedule made
        self.seq = 0
        self.before = Snapshot()

    def teardown(self) -> None:
        self.kernel.close()

    def _rid(self) -> str:
        self.seq += 1
        return f"r{self.seq}"

    def _pick(self, data: st.DataObject, ids: list[int], label: str) -> int | None:
        return data.draw(st.sampled_from(sorted(ids)), label=label) if ids else None

    def _with(self, *statuses: str) -> list[int]:
        return [r.id for r in self.before.rows.values() if r.status in statuses]

    def _operator(self, action: Any, *args: Any, **kwargs: Any) -> None:
        """An operator's action; a refusal must be one an operator may meet."""
        try:
            action(*args, request_id=self._rid(), operator="op", **kwargs)
        except KernelError as exc:
            assert exc.code in OPERATOR_REFUSALS, f"{action.__name__}: {exc.code} {exc}"

    # -- definitions ------------------------------------------------------------------

    @initialize(data=st.data())
    def define(self, data: st.DataObject) -> None:
        self.kernel.set_pool_limit(POOL, 1)
        for job_id in SCHEDULED:
            self.kernel.define_job(data.draw(scheduled_spec(job_id, self.clock.now)))
        self.kernel.define_job(data.draw(chained_spec()))

    @rule(data=st.data(), job=st.sampled_from((*SCHEDULED, CHAINED)))
    def revise(self, data: st.DataObject, job: str) -> None:
        spec = data.draw(chained_spec() if job == CHAINED else scheduled_spec(job, self.clock.now))
        spec["enabled"] = job not in self.disabled  # the spec says it: an operator's edit keeps it
        current = self.kernel.get_job(job)
        self.kernel.revise_job(spec, expected_revision=current.revision, operator="op")

    @rule(job=st.sampled_from(SCHEDULED), enabled=st.booleans())
    def set_enabled(self, job: str, enabled: bool) -> None:
        self.kernel.set_job_enabled(job, enabled, operator="op")
        (self.disabled.discard if enabled else self.disabled.add)(job)

    # -- Beat and time ------------------------------------------------------------------

    def _heartbeat(self) -> None:
        """Every live holder renews, as its lease keeper does, and acts on what it learns."""
        for occ_id, claim in list(self.holders.items()):
            answer = self.kernel.renew(
                occ_id,
                owner=claim.owner,
                fence=claim.fence,
                lease=LEASE_S,
                checkpoint={"seq": self.seq},
            )
            if answer.cancel_requested:
                del self.holders[occ_id]
                self.kernel.cancelled(occ_id, owner=claim.owner, fence=claim.fence)
            elif answer.pause is not None:
                del self.holders[occ_id]
                self.kernel.ack_pause(
                    occ_id,
                    owner=claim.owner,
                    fence=claim.fence,
                    request_id=answer.pause.request_id,
                    expected_revision=answer.pause.revision,
                    safe_point="adapter_checkpoint",
                    checkpoint={"at": self.seq},
                )

    @rule(seconds=st.sampled_from([5, 25, 70, 400]))
    def advance(self, seconds: float) -> None:
        """Time passes; live holders renew every 10 s (a third of the lease), the vanished
        do not."""
        while seconds > 0:
            self._heartbeat()
            step = min(seconds, 10)
            self.clock.advance(step)
            seconds -= step

    @rule()
    def beat_tick(self) -> None:
        """Beat's tick on the kernel: lease expiry, approval timeouts, due firings planned by
        Beat's own planner and fired by CAS, each tick's firings within the job's bounds."""
        self._heartbeat()
        self.kernel.expire_leases()
        self.kernel.apply_approval_timeouts()
        now = self.kernel.now()
        for job in self.kernel.due_jobs():
            plan = plan_job(self.kernel, job, now)
            report = fire_plan(self.kernel, job, plan)
            made = [(i, self.kernel.get_occurrence(i).scheduled_for) for i in report.created]
            created_within_bounds(job.spec["schedule"] or {}, self.made[job.id], made)
            self.made[job.id] += len(made)

    @rule()
    def retention(self) -> None:
        self.kernel.apply_retention(RETENTION)
        self.kernel.prune(older_than=timedelta(minutes=2))

    # -- workers ------------------------------------------------------------------------

    def _held(self, claim: Claim | None) -> None:
        if claim is not None:
            assert claim.occurrence.id not in self.holders, "two live leases on one run"
            self.holders[claim.occurrence.id] = claim

    @rule(data=st.data(), owner=st.sampled_from(OWNERS))
    def claim(self, data: st.DataObject, owner: str) -> None:
        """A claim by id succeeds exactly when the blocker read says ``none`` (one definition,
        two readers)."""
        occ_id = self._pick(data, self._with(*WAITING), "waiting")
        if occ_id is None:
            return
        blocker = self.kernel.blocker(occ_id)
        claim = self.kernel.claim(occ_id, owner=owner)
        assert blocker is not None
        assert (claim is not None) == (blocker.kind == "none"), (
            f"occurrence {occ_id}: blocker {blocker.kind!r} ({blocker.text}), claimed: {claim}"
        )
        self._held(claim)

    @rule(owner=st.sampled_from(OWNERS))
    def claim_next(self, owner: str) -> None:
        self._held(self.kernel.claim_next(owner=owner))

    @precondition(lambda self: self.holders)
    @rule(data=st.data(), outcome=st.sampled_from(["success", "retryable", "fatal", "unknown"]))
    def settle(self, data: st.DataObject, outcome: str) -> None:
        occ_id = self._pick(data, list(self.holders), "holder")
        assert occ_id is not None
        claim = self.holders.pop(occ_id)
        if outcome == "success":
            self.kernel.succeed(occ_id, owner=claim.owner, fence=claim.fence, result="ok")
            return
        self.kernel.fail(
            occ_id,
            owner=claim.owner,
            fence=claim.fence,
            code="BOOM",
            message="it failed",
            retryable=outcome != "fatal",
            effect="unknown" if outcome == "unknown" else "not_applied",
        )

    @precondition(lambda self: self.holders)
    @rule(data=st.data())
    def kill(self, data: st.DataObject) -> None:
        """The owner vanishes mid-run (kill -9): it never renews or settles again."""
        occ_id = self._pick(data, list(self.holders), "killed")
        assert occ_id is not None
        self.zombies.append(self.holders.pop(occ_id))

    @precondition(lambda self: self.zombies)
    @rule(data=st.data())
    def zombie_writes(self, data: st.DataObject) -> None:
        """I2: a vanished owner whose lease expired or was taken is refused (LEASE_LOST)."""
        now_ms = self.clock.ms
        lost = [
            z
            for z in self.zombies
            if (row := self.before.rows.get(z.occurrence.id)) is None
            or row.fence != z.fence
            or row.status != "running"
            or (row.lease_expires_at or 0) <= now_ms
        ]
        if not lost:
            return
        z = data.draw(st.sampled_from(lost), label="zombie")
        with pytest.raises(LeaseLost):
            self.kernel.succeed(z.occurrence.id, owner=z.owner, fence=z.fence)

    # -- operators ----------------------------------------------------------------------

    @precondition(lambda self: self.holders)
    @rule(data=st.data())
    def pause(self, data: st.DataObject) -> None:
        occ_id = self._pick(data, list(self.holders), "paused")
        assert occ_id is not None
        self._operator(
            self.kernel.request_pause,
            occ_id,
            expected_fence=self.holders[occ_id].fence,
            safe_points=SAFE_POINTS,
        )

    @rule(data=st.data())
    def resume(self, data: st.DataObject) -> None:
        waiting = self._with(*WAITING)
        found = self.kernel.blockers(waiting)
        paused = [i for i in waiting if (b := found.get(i)) is not None and b.kind == "paused"]
        occ_id = self._pick(data, paused, "resumed")
        if occ_id is not None:
            self._operator(self.kernel.resume, occ_id)

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        occ_id = self._pick(data, self._with(*WAITING, "running"), "cancelled")
        if occ_id is not None:
            self._operator(self.kernel.cancel, occ_id)

    @rule(job=st.sampled_from((*SCHEDULED, CHAINED)), force=st.booleans())
    def run_now(self, job: str, force: bool) -> None:
        try:
            self.kernel.run_now(job, request_id=self._rid(), operator="op", force=force)
        except KernelError as exc:  # not admitted: overlap or a full queue
            assert not force and exc.code == "STATE_CONFLICT", f"run_now: {exc.code} {exc}"

    @rule(data=st.data(), decision=st.sampled_from(["applied", "not_applied", "abandon"]))
    def adjudicate(self, data: st.DataObject, decision: str) -> None:
        occ_id = self._pick(data, self._with("needs_adjudication"), "adjudicated")
        if occ_id is not None:
            self._operator(self.kernel.adjudicate, occ_id, decision=decision)

    @rule(data=st.data())
    def requeue(self, data: st.DataObject) -> None:
        occ_id = self._pick(data, self._with("dead_letter"), "requeued")
        if occ_id is not None:
            self._operator(self.kernel.requeue, occ_id)

    @rule(data=st.data(), approve=st.booleans())
    def decide_approval(self, data: st.DataObject, approve: bool) -> None:
        occ_id = self._pick(data, self._with("awaiting_approval"), "approval")
        if occ_id is not None:
            self._operator(self.kernel.approve if approve else self.kernel.reject, occ_id)

    # -- invariants ---------------------------------------------------------------------

    @invariant()
    def tables_hold(self) -> None:
        now = snapshot(self.kernel)
        waiting_has_a_blocker(self.kernel, now, self.disabled)
        leases_hold(self.before, now)
        transitions_logged(self.kernel, self.before, now)
        unresolved_kept(new_unresolved(self.before), now)
        notified_once(now)
        self.before = now


def _run(url: str) -> None:
    machine = type("Machine", (FeatureMachine,), {"url": url})
    run_state_machine_as_test(machine, settings=CI)


def test_features_compose(kernel: Kernel, kernel_url: str) -> None:
    """On the database ``kernel`` migrated."""
    _run(kernel_url)


def _dead_letter(k: Harness, occurrence_id: int) -> None:
    """The setup made a dead letter."""
    if k.kernel.get_occurrence(occurrence_id).status != "dead_letter":
        pytest.fail(f"occurrence {occurrence_id} is no dead letter")


def test_a_dead_letter_made_by_lease_expiry_is_notified(k: Harness) -> None:
    """A notify job's run whose worker was killed on its last lost lease: Beat's lease
    expiry makes it a dead letter (POISON_PILL), and its notification with it."""
    k.define("job", max_lost_leases=0, notify={"on": ["dead_letter"], "task": "t"})
    claim = k.running("job")
    k.clock.advance(LEASE_S + 1)
    k.kernel.expire_leases()
    _dead_letter(k, claim.occurrence.id)
    notified_once(snapshot(k.kernel))


def test_a_dead_letter_made_by_an_abandon_verdict_is_notified(k: Harness) -> None:
    k.define("job", delivery="at-most-once", notify={"on": ["dead_letter"], "task": "t"})
    claim = k.running("job")
    k.clock.advance(LEASE_S + 1)
    k.kernel.expire_leases()
    k.kernel.adjudicate(claim.occurrence.id, decision="abandon", request_id="r", operator="op")
    _dead_letter(k, claim.occurrence.id)
    notified_once(snapshot(k.kernel))
