"""Model-based test of the occurrence lifecycle (SPEC §3 I1–I7, §4).

Hypothesis drives a memory kernel on a manual clock through claims, renewals,
settles, lease expiry, pause/resume, hand backs, requeues, adjudications,
cancels, approvals (approve, reject, timeout) and request-id replays, by current
and by stale (owner, fence) pairs.
A plain-Python model of SPEC §4 predicts every answer. After each step the
kernel's tables must equal the model and the event log must satisfy I1, I2, I4
and I6; a refused or deduplicated call must leave every table unchanged (I2,
I7), and a call that changed state must have appended an event (I3).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from lifecycle_model import (
    FAULTS,
    JOBS,
    KNOWN_OUTCOME,
    LEASE_S,
    OWNERS,
    RUNNABLE,
    SAFE_POINTS,
    SETTLED,
    STATE_TABLES,
    MJob,
    MOcc,
    Model,
    Refused,
    Snapshot,
    asked,
    job_spec,
    snapshot,
)

from kernel.errors import KernelError
from kernel.records import checkpoint_data
from kernel.store import Kernel
from kernel.testing import ManualClock, memory_kernel
from kernel.transitions.occurrences import allowed_pairs

pytestmark = pytest.mark.long

TRANSITIONS = allowed_pairs()


class KernelMachine(RuleBasedStateMachine):
    """Drives the kernel and the model side by side; see the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock()
        self.kernel = memory_kernel(self.clock)
        self.model = Model(self.clock)
        self.claims: list[tuple[int, str, int]] = []  # every (occurrence, owner, fence) claimed
        self.pause_rids: list[str] = []
        self.replays: dict[str, tuple[Callable[[], Any], Callable[[], Any], int]] = {}
        self.statuses: dict[int, str] = {}
        self.seq = 0
        self.before: Snapshot = {}
        self.after: Snapshot = {}  # the database now, unless emptied by a write outside _act

    def teardown(self) -> None:
        self.kernel.close()

    def _next(self, prefix: str) -> str:
        self.seq += 1
        return f"{prefix}{self.seq}"

    def _act(self, predict: Callable[[], Any], call: Callable[[], Any]) -> tuple[Any, Any]:
        """Call the model and the kernel: the same answer; a refusal changes nothing (I2)."""
        self.before = self.after or snapshot(self.kernel)
        try:
            expected, expected_code = predict(), None
        except Refused as refusal:
            expected, expected_code = None, refusal.code
        try:
            got, got_code = call(), None
        except KernelError as exc:
            got, got_code = None, exc.code
        self.after = snapshot(self.kernel)
        assert got_code == expected_code, f"kernel said {got_code}, the model {expected_code}"
        if expected_code is not None:
            self._unchanged()
        return expected, got

    def _unchanged(self) -> None:
        assert self.after == self.before, "a refused or deduplicated call changed the database"

    def _logged(self) -> None:
        """I3: a call that changed state appended an event (a request id alone is bookkeeping)."""
        if any(self.after[t] != self.before[t] for t in STATE_TABLES):
            assert len(self.after["events"]) > len(self.before["events"]), "a change, no event"

    def _occ(self, data: st.DataObject, fits: Callable[[MOcc], bool] = lambda o: False) -> int:
        """An occurrence, mostly one that ``fits`` the action (the rest exercise refusals)."""
        every = sorted(self.model.occs)
        fitting = [i for i in every if fits(self.model.occs[i])]
        pool = fitting if fitting and data.draw(st.integers(0, 3), label="fitting") else every
        return data.draw(st.sampled_from(pool), label="occurrence")

    def _holder(
        self, data: st.DataObject, fault: str | None, fits: Callable[[MOcc], bool] = asked
    ) -> tuple[int, str, int]:
        """A live holder's (occurrence, owner, fence), mostly one that ``fits``; with ``fault``,
        a stale claim's or an intruder's."""
        current = [(o.id, o.owner, o.fence) for o in self.model.occs.values() if o.owner]
        live = [h for h in current if self.model.live(self.model.occs[h[0]])]
        fitting = [h for h in live if fits(self.model.occs[h[0]])]
        if not (fitting and data.draw(st.integers(0, 3), label="fitting")):
            fitting = live or current
        stale = [c for c in self.claims if c not in current]
        pool = (stale if fault == "stale" else fitting) or self.claims
        occ_id, owner, fence = data.draw(st.sampled_from(pool), label="claim")
        return occ_id, "intruder" if fault == "intruder" else owner, fence

    def _operator(self, rid: str, predict: Callable[[], bool], call: Callable[[], Any]) -> None:
        """An operator action: a first call changes and logs; a replay is deduplicated (I7)."""
        dedup, got = self._act(predict, call)
        if got is not None:
            assert got.deduplicated == dedup
            if dedup:
                self._unchanged()
            self._logged()
            self.replays.setdefault(rid, (predict, call, got.occurrence.id))

    # -- creation (I1) -------------------------------------------------------------------

    @initialize(attempts=st.tuples(*[st.integers(1, 3)] * len(JOBS)))
    def define_jobs(self, attempts: tuple[int, ...]) -> None:
        """Three jobs with 1–3 attempts each, and two queued occurrences of each."""
        for job_id, max_attempts in zip(JOBS, attempts, strict=True):
            self.kernel.define_job(job_spec(job_id, max_attempts))
            self.model.jobs[job_id], self.after = MJob(max_attempts), {}
            self.fire(job_id, 2, "fresh")

    @rule(
        job=st.sampled_from(list(JOBS)),
        new=st.integers(1, 2),
        variant=st.sampled_from(["fresh", "dup", "stale_revision", "stale_cursor"]),
    )
    def fire(self, job: str, new: int, variant: str) -> None:
        """Beat materialises each firing once, under any revision (I1); a stale Beat, nothing."""
        mj, keys = self.model.jobs[job], [self._next("t") for _ in range(new)]
        cursor = self._next("c")
        old = self.model.keys[job][:1] if variant == "dup" else []
        firings = [(k, self.clock.now) for k in old + keys]
        _, report = self._act(
            lambda: None,
            lambda: self.kernel.fire(
                job,
                expected_revision=mj.revision + (variant == "stale_revision"),
                expected_cursor="stale-cursor" if variant == "stale_cursor" else mj.cursor,
                firings=firings,
                next_cursor=(cursor, self.clock + timedelta(hours=1)),
            ),
        )
        if variant.startswith("stale"):
            assert report.stale
            return self._unchanged()
        assert not report.stale and len(report.created) == new, "materialised twice or never"
        self._logged()
        for occ_id, key in zip(report.created, keys, strict=True):
            self.model.add(occ_id, job, key)
        mj.cursor = cursor

    @rule(job=st.sampled_from(list(JOBS)), stale=st.booleans())
    def revise(self, job: str, stale: bool) -> None:
        """A new revision (by CAS on the old one) re-plans the cursor."""
        mj, tag = self.model.jobs[job], int(self._next(""))
        spec, seen = job_spec(job, mj.max_attempts, tag), mj.revision - stale

        def predict() -> None:
            if stale:
                raise Refused("REVISION_CONFLICT")
            mj.revision, mj.cursor = mj.revision + 1, None

        self._act(predict, lambda: self.kernel.revise_job(spec, expected_revision=seen))
        self._logged()

    @rule(job=st.sampled_from(list(JOBS)))
    def run_now(self, job: str) -> None:
        rid = self._next("run")
        self._operator(
            rid,
            lambda: self.model.run_now(job, rid),
            lambda: self.kernel.run_now(job, request_id=rid, operator="op", force=True),
        )
        self.model.add(self.replays[rid][2], job, f"manual:{rid}", fired=False)

    # -- claims --------------------------------------------------------------------------

    def _claimed(self, expected: tuple[int, int, bool] | None, got: Any, owner: str) -> None:
        if expected is None:
            assert got is None, f"claimed {got.occurrence.id}; the model says not claimable"
            # Unchanged, unless it settled an expired lease (the model checks which).
            return self._logged()
        occ_id, fence, resuming = expected
        assert got is not None, f"occurrence {occ_id} should have been claimed"
        assert (got.occurrence.id, got.fence, got.resumed) == expected
        old = next(r["fence"] for r in self.before["occurrences"] if r["id"] == occ_id)
        assert fence == old + 1, "I2: a claim adds exactly one to the fence"
        control = self.model.occs[occ_id].control
        if resuming and control is not None:
            assert got.checkpoint == control.checkpoint
        self._logged()
        self.claims.append((occ_id, owner, fence))

    @precondition(lambda self: self.model.occs)
    @rule(data=st.data(), owner=st.sampled_from(OWNERS))
    def claim(self, data: st.DataObject, owner: str) -> None:
        occ_id = self._occ(data, lambda o: o.status in RUNNABLE or o.status == "running")
        expected, got = self._act(
            lambda: self.model.claim(occ_id, owner),
            lambda: self.kernel.claim(occ_id, owner=owner, lease=LEASE_S),
        )
        self._claimed(expected, got, owner)

    @rule(owner=st.sampled_from(OWNERS))
    def claim_next(self, owner: str) -> None:
        expected, got = self._act(
            lambda: self.model.claim_next(owner),
            lambda: self.kernel.claim_next(owner=owner, lease=LEASE_S),
        )
        self._claimed(expected, got, owner)

    @precondition(lambda self: self.claims)
    @rule(data=st.data(), fault=st.sampled_from(FAULTS))
    def renew(self, data: st.DataObject, fault: str | None) -> None:
        occ_id, owner, fence = self._holder(data, fault)
        expected, got = self._act(
            lambda: self.model.renew(occ_id, owner, fence),
            lambda: self.kernel.renew(occ_id, owner=owner, fence=fence, lease=LEASE_S),
        )
        if got is not None:
            assert (got.pause.request_id if got.pause else None, got.cancel_requested) == expected
            assert self.after["events"] == self.before["events"]

    @precondition(lambda self: self.claims)
    @rule(
        data=st.data(),
        fault=st.sampled_from(FAULTS),
        outcome=st.sampled_from(["succeeded", "retryable", "fatal", "cancelled"]),
    )
    def settle(self, data: st.DataObject, fault: str | None, outcome: str) -> None:
        occ_id, owner, fence = self._holder(data, fault)
        k, held = self.kernel, {"owner": owner, "fence": fence}
        call = {
            "succeeded": lambda: k.succeed(occ_id, **held, result={"ok": True}),
            "cancelled": lambda: k.cancelled(occ_id, **held),
            "retryable": lambda: k.fail(occ_id, **held, code="BOOM", message="m"),
            "fatal": lambda: k.fail(occ_id, **held, code="FATAL", message="m", retryable=False),
        }[outcome]
        expected, got = self._act(lambda: self.model.settle(occ_id, owner, fence, outcome), call)
        if expected is not None:
            assert got == (expected if outcome in ("retryable", "fatal") else None)
            self._logged()

    @precondition(lambda self: self.claims)
    @rule(
        data=st.data(),
        fault=st.sampled_from([*FAULTS, "rid", "revision", "safe_point"]),
        name_revision=st.booleans(),
    )
    def ack_pause(self, data: st.DataObject, fault: str | None, name_revision: bool) -> None:
        occ_id, owner, fence = self._holder(data, fault)
        c = self.model.occs[occ_id].control
        rid = c.pause_rid if c is not None else None
        if rid is None or fault == "rid":
            others = [r for r in self.pause_rids if r != rid]
            rid = data.draw(st.sampled_from([*others, "never-requested"]), label="rid")
        named = c is not None and (name_revision or fault == "revision")
        rev = c.revision - (fault == "revision") if c is not None and named else None
        declared = c.safe_points if c is not None else ()
        points = [p for p in SAFE_POINTS if (p in declared) != (fault == "safe_point")]
        point = data.draw(st.sampled_from(points or list(SAFE_POINTS)), label="safe_point")
        self._act(
            lambda: self.model.release(occ_id, owner, fence, point, rid, rev),
            lambda: self.kernel.ack_pause(
                occ_id,
                owner=owner,
                fence=fence,
                request_id=rid,
                expected_revision=rev,
                safe_point=point,
                checkpoint={"at": point, "fence": fence},
            ),
        )
        self._logged()

    @precondition(lambda self: self.claims)
    @rule(data=st.data(), fault=st.sampled_from(FAULTS), point=st.sampled_from(SAFE_POINTS))
    def hand_back(self, data: st.DataObject, fault: str | None, point: str) -> None:
        occ_id, owner, fence = self._holder(data, fault)
        self._act(
            lambda: self.model.release(occ_id, owner, fence, point, None, None),
            lambda: self.kernel.hand_back(
                occ_id,
                owner=owner,
                fence=fence,
                safe_point=point,
                checkpoint={"at": point, "fence": fence},
            ),
        )
        self._logged()

    # -- time ----------------------------------------------------------------------------

    @rule(seconds=st.sampled_from([1, 11, 31, 61]))
    def advance(self, seconds: int) -> None:
        """Past backoff (10 s, 20 s) and past lease expiry (30 s) in a step or two."""
        self.clock.advance(seconds)

    @rule(seconds=st.sampled_from([0, LEASE_S + 1]))
    def expire_leases(self, seconds: int) -> None:
        """Lease expiry, often just past a lease."""
        self.clock.advance(seconds)
        expected, got = self._act(self.model.expire, self.kernel.expire_leases)
        assert got == expected
        self._logged()
        if not sum(expected.values()):
            self._unchanged()

    # -- operators (I7) ------------------------------------------------------------------

    @precondition(lambda self: self.model.occs)
    @rule(data=st.data(), fault=st.sampled_from([None, None, "stale", "unsupported"]))
    def request_pause(self, data: st.DataObject, fault: str | None) -> None:
        occ_id, rid = self._occ(data, self.model.live), self._next("pause")
        fence = self.model.occs[occ_id].fence - (fault == "stale")
        points: tuple[str, ...] = ()
        if fault != "unsupported":
            points = data.draw(st.sampled_from([SAFE_POINTS[:1], SAFE_POINTS]), label="points")
        self._operator(
            rid,
            lambda: self.model.request_pause(occ_id, fence, rid, points),
            lambda: self.kernel.request_pause(
                occ_id, expected_fence=fence, request_id=rid, safe_points=points, operator="op"
            ),
        )
        self.pause_rids.append(rid)

    @precondition(lambda self: self.model.occs)
    @rule(data=st.data(), revision=st.sampled_from(["current", "stale", None]))
    def resume(self, data: st.DataObject, revision: str | None) -> None:
        occ_id = self._occ(data, lambda o: o.control is not None and o.control.state == "paused")
        rid, c = self._next("resume"), self.model.occs[occ_id].control
        rev = None if revision is None else (c.revision if c else 1) - (revision == "stale")
        self._operator(
            rid,
            lambda: self.model.resume(occ_id, rid, rev),
            lambda: self.kernel.resume(
                occ_id, request_id=rid, operator="op", expected_revision=rev
            ),
        )

    @precondition(lambda self: self.model.occs)
    @rule(data=st.data(), fault=st.sampled_from([None, None, "fence", "code"]))
    def requeue(self, data: st.DataObject, fault: str | None) -> None:
        """Requeue with the evidence seen (fence, error code), or with wrong evidence."""
        occ_id, rid = self._occ(data, lambda o: o.status == "dead_letter"), self._next("requeue")
        o = self.model.occs[occ_id]
        fence, code = o.fence + (fault == "fence"), "WRONG" if fault == "code" else str(o.error)
        self._operator(
            rid,
            lambda: self.model.requeue(occ_id, fence, code, rid),
            lambda: self.kernel.requeue(
                occ_id,
                expected_fence=fence,
                request_id=rid,
                expected_error_code=code,
                operator="op",
            ),
        )

    @precondition(lambda self: self.model.occs)
    @rule(data=st.data(), decision=st.sampled_from(["applied", "not_applied", "abandon"]))
    def adjudicate(self, data: st.DataObject, decision: str) -> None:
        occ_id = self._occ(data, lambda o: o.status == "needs_adjudication")
        rid = self._next("adjudicate")
        self._operator(
            rid,
            lambda: self.model.adjudicate(occ_id, decision, rid),
            lambda: self.kernel.adjudicate(
                occ_id, decision=decision, request_id=rid, operator="op"
            ),
        )

    @precondition(lambda self: self.model.occs)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        occ_id, rid = self._occ(data, lambda o: o.status == "running"), self._next("cancel")
        self._operator(
            rid,
            lambda: self.model.cancel(occ_id, rid),
            lambda: self.kernel.cancel(occ_id, request_id=rid, operator="op"),
        )

    @precondition(lambda self: self.model.occs)
    @rule(data=st.data(), approved=st.booleans())
    def decide_approval(self, data: st.DataObject, approved: bool) -> None:
        occ_id = self._occ(data, lambda o: o.status == "awaiting_approval")
        rid = self._next("approve" if approved else "reject")
        decide = self.kernel.approve if approved else self.kernel.reject
        self._operator(
            rid,
            lambda: self.model.decide_approval(occ_id, approved, rid),
            lambda: decide(occ_id, request_id=rid, operator="op"),
        )

    @rule()
    def approval_timeouts(self) -> None:
        """Beat applies the auto action of every approval past its timeout."""
        expected, got = self._act(self.model.approval_timeouts, self.kernel.apply_approval_timeouts)
        assert got == expected
        self._logged()

    @precondition(lambda self: self.replays)
    @rule(data=st.data(), changed=st.booleans())
    def replay(self, data: st.DataObject, changed: bool) -> None:
        """A replayed request id answers deduplicated; with other evidence it is refused."""
        rid = data.draw(st.sampled_from(sorted(self.replays)), label="rid")
        predict, call, occ_id = self.replays[rid]
        if changed:  # the same request id for another action, target or decision
            target = self._occ(data)
            decision = "applied" if self.model.requests[rid][0] == "adjudicate" else "abandon"
            if self.model.requests[rid] == ("adjudicate", str(target), {"decision": decision}):
                decision = "abandon"
            self._act(
                lambda: self.model.adjudicate(target, decision, rid),
                lambda: self.kernel.adjudicate(
                    target, decision=decision, request_id=rid, operator="op"
                ),
            )
            return
        dedup, got = self._act(predict, call)
        if got is None:  # a run-now replayed after its job was revised: refused by both
            return
        assert dedup and got.deduplicated and got.occurrence.id == occ_id
        self._unchanged()

    # -- after every step ----------------------------------------------------------------

    @invariant()
    def kernel_matches_model(self) -> None:
        snap = self.after or snapshot(self.kernel)
        rows = {r["id"]: r for r in snap["occurrences"]}
        controls = {r["occurrence_id"]: r for r in snap["controls"]}
        grants: dict[int, list[int]] = defaultdict(list)
        for g in snap["requeue_grants"]:
            if g["claimed_at"] is None:
                grants[g["occurrence_id"]].append(g["expected_fence"])
        assert set(rows) == set(self.model.occs)
        for occ_id, o in self.model.occs.items():
            r, c, m = rows[occ_id], controls.get(occ_id), o.control
            error = json.loads(r["last_error"])["code"] if r["last_error"] else None
            got = (
                r["status"],
                r["attempt"],
                r["lost_leases"],
                r["fence"],
                r["lease_owner"],
                r["lease_expires_at"],
                r["available_at"],
                bool(r["cancel_requested"]),
                error,
            )
            want = (
                o.status,
                o.attempt,
                o.lost_leases,
                o.fence,
                o.owner,
                o.lease_until,
                o.available_at,
                o.cancel_requested,
                o.error,
            )
            assert got == want, f"occurrence {occ_id}: kernel {got}, model {want}"
            got_c = c and (
                c["state"],
                c["revision"],
                c["expected_fence"],
                c["pause_request_id"],
                checkpoint_data(c["checkpoint"]),
            )
            want_c = m and (m.state, m.revision, m.fence, m.pause_rid, m.checkpoint)
            assert got_c == want_c, f"occurrence {occ_id} control: kernel {got_c}, model {want_c}"
            assert grants.get(occ_id, []) == ([] if o.grant_fence is None else [o.grant_fence])
            previous = self.statuses.get(occ_id, o.created_status)
            assert previous == o.status or (previous, o.status) in TRANSITIONS
            self.statuses[occ_id] = o.status
        check_event_log(snap)


def check_event_log(snap: Snapshot) -> None:
    """I1, I2, I4 and I6, read from the tables and the append-only log alone."""
    occurrences = snap["occurrences"]
    assert len({(r["job_id"], r["trigger_key"]) for r in occurrences}) == len(occurrences)
    history: dict[int, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    for e in snap["events"]:
        if e["occurrence_id"] is not None:
            history[e["occurrence_id"]].append((e["type"], json.loads(e["data"]) | e))
    for row in occurrences:
        events = history[row["id"]]
        claims = [data["fence"] for type_, data in events if type_ == "occurrence_claimed"]
        assert claims == list(range(1, row["fence"] + 1)), f"{row['id']}: claims at {claims}"
        closed: str | None = None  # the settled status, until a requeue revives it (I4)
        known = True  # the outcome of the last run is known (I6)
        for type_, data in events:
            if type_ == "occurrence_claimed":
                assert closed is None, f"occurrence {row['id']} claimed after it {closed} (I4)"
                assert known or row["delivery"] == "at-least-once", f"{row['id']} ran twice (I6)"
                known = False
            elif type_ == "occurrence_adjudicated":
                closed = data["status"] if data["status"] in SETTLED else None
            elif type_.removeprefix("occurrence_") in SETTLED:
                closed = type_.removeprefix("occurrence_")
            elif type_ == "occurrence_requeued":
                assert closed == "dead_letter"
                closed = None
            known = known or type_ in KNOWN_OUTCOME


# A failure shrinks for up to five minutes (Hypothesis' own limit) before it reports the
# shortest sequence it found; the default 120 s timeout would kill it first.
@pytest.mark.timeout(600)
def test_lifecycle_matches_the_model() -> None:
    run_state_machine_as_test(
        KernelMachine,
        settings=settings(
            max_examples=100,
            stateful_step_count=60,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


# -- sequences the machine found rarely, pinned ---------------------------------------------


def _running(
    kernel: Kernel, n: int, job_id: str = "alo", attempts: int = 3, lost_leases: int = 1
) -> list[Any]:
    """Define ``job_id`` if needed; fire ``n`` occurrences and claim each (owner w1)."""
    if job_id not in {j.id for j in kernel.list_jobs()}:
        kernel.define_job(job_spec(job_id, attempts, max_lost_leases=lost_leases))
    job = kernel.get_job(job_id)
    now = kernel.now()
    report = kernel.fire(
        job_id,
        expected_revision=job.revision,
        expected_cursor=job.next_trigger_key,
        firings=[(f"{job_id}-{job.next_trigger_key}-{i}", now) for i in range(n)],
        next_cursor=(f"after-{len(kernel.list_occurrences(limit=1000))}", now + timedelta(hours=1)),
    )
    claims = [kernel.claim(occ_id, owner="w1", lease=LEASE_S) for occ_id in report.created]
    assert all(claims)
    return claims


def test_a_cancel_request_wins_over_retry_and_hand_back() -> None:
    """A cancel-requested occurrence is never left waiting where no claim may take it."""
    kernel = memory_kernel()
    retried, handed, fatal = _running(kernel, 3)
    for i, c in enumerate((retried, handed, fatal)):
        kernel.cancel(c.occurrence.id, request_id=f"cancel-{i}", operator="op")
    held = {"owner": "w1"}
    assert (
        kernel.fail(retried.occurrence.id, **held, fence=1, code="BOOM", message="m") == "cancelled"
    )
    kernel.hand_back(
        handed.occurrence.id, **held, fence=1, safe_point="before_execute", checkpoint=1
    )
    assert kernel.get_occurrence(handed.occurrence.id).status == "cancelled"
    kernel.fail(fatal.occurrence.id, **held, fence=1, code="FATAL", message="m", retryable=False)
    kernel.requeue(fatal.occurrence.id, expected_fence=1, expected_error_code="FATAL",
                   request_id="requeue", operator="op")  # fmt: skip
    assert kernel.claim(fatal.occurrence.id, owner="w2", lease=LEASE_S) is not None


def test_a_hand_back_while_a_pause_is_pending_pauses() -> None:
    kernel = memory_kernel()
    (c,) = _running(kernel, 1)
    kernel.request_pause(c.occurrence.id, expected_fence=1, request_id="p", safe_points=SAFE_POINTS,
                         operator="op")  # fmt: skip
    kernel.hand_back(
        c.occurrence.id, owner="w1", fence=1, safe_point="before_execute", checkpoint=1
    )
    occurrence = kernel.get_occurrence(c.occurrence.id)
    assert occurrence.control is not None and occurrence.control.state == "paused"
    assert kernel.claim(c.occurrence.id, owner="w2", lease=LEASE_S) is None


def test_claim_next_looks_past_a_backlog_it_cannot_claim() -> None:
    """More paused occurrences, or expired leases with no lost lease left, than one
    candidate batch."""
    clock = ManualClock()
    kernel = memory_kernel(clock)
    for i, c in enumerate(_running(kernel, 20)):
        rid, occ_id = f"p{i}", c.occurrence.id
        kernel.request_pause(occ_id, expected_fence=1, request_id=rid, safe_points=SAFE_POINTS,
                             operator="op")  # fmt: skip
        kernel.ack_pause(occ_id, owner="w1", fence=1, request_id=rid, expected_revision=None,
                         safe_point="before_execute", checkpoint=i)  # fmt: skip
    (fresh,) = _running(kernel, 1, "amo")
    kernel.fail(fresh.occurrence.id, owner="w1", fence=1, code="BOOM", message="m")
    clock.advance(11)
    got = kernel.claim_next(owner="w2", lease=LEASE_S)
    assert got is not None and got.occurrence.id == fresh.occurrence.id
    kernel.succeed(fresh.occurrence.id, owner="w2", fence=2)
    _running(kernel, 20, "alo-b", lost_leases=0)
    (reclaimable,) = _running(kernel, 1, "alo")
    clock.advance(LEASE_S + 1)  # every lease expired; only the last one may be reclaimed
    got = kernel.claim_next(owner="w3", lease=LEASE_S)
    assert got is not None and got.occurrence.id == reclaimable.occurrence.id
