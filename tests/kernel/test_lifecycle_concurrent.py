"""The lifecycle model with writers that really run at once, on PostgreSQL and SQLite (issue 8).

A seeded random walk over a few occurrences of four jobs, one of them approval-gated
(tests/lifecycle_model.py). Each step picks two or three operations, mostly on one
occurrence (worker renew, settle, hand back, pause ack; operator cancel, pause, resume,
requeue, adjudicate, approve, reject, and now and then a job cancel of its job, sometimes
under one request id; a worker's ask of the adapter about an uncertain run and the
adapter's answer, a stale ask's too; Beat lease expiry, approval timeouts, fire,
dispatch; claims), and runs them at once through :class:`interleave.Actors` (on PostgreSQL
every other step holds the occurrence's row lock until each has read). After every step:

- linearizability: the answers and the tables equal what the model gives for the same
  operations applied in SOME serial order (the model then continues from that order);
- every refusal is a KernelError with a code;
- every occurrence is settled or still movable by some actor, and its last status event
  names its status (:func:`interleave.problems`).

``claim_next`` on PostgreSQL skips rows other transactions hold (SKIP LOCKED), so there it
may take any occurrence a claim would take at that point, or none; on SQLite it must take
the one the model names.
"""

from __future__ import annotations

import copy
import itertools
import json
import random
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from lifecycle_model import (
    JOBS,
    LEASE_S,
    OWNERS,
    RUNNABLE,
    SAFE_POINTS,
    MJob,
    MOcc,
    Model,
    Refused,
    Snapshot,
    job_spec,
    snapshot,
)

from kernel.reports import Verdict
from kernel.states import Decision
from kernel.store import Kernel
from kernel.testing import ManualClock
from tests.kernel.interleave import Actors, Outcome, problems, refusals_are_kernel_errors

STEPS = 60
#: How long a taken adapter ask may answer; steps advance the clock by up to LEASE_S + 1.
ASK_WINDOW_S = 20
SEEDS = range(3)


@dataclass
class Op:
    """One actor's call and the model's prediction of it.

    ``predict(model, outcome)`` applies the operation to ``model`` and returns what the
    kernel should have answered (raising Refused for a refusal); it sees the kernel's
    ``outcome`` only where the model cannot choose alone (new occurrence ids, claim_next
    on PostgreSQL). ``answer(value)`` turns the kernel's value into the model's terms.
    """

    name: str
    call: Callable[[Kernel], Any]
    predict: Callable[[Model, Outcome], Any]
    answer: Callable[[Any], Any] = lambda value: value


def _claim_answer(got: Any) -> Any:
    return None if got is None else (got.occurrence.id, got.fence, got.resumed)


class Walk:
    """The random walk: the kernel seen through actors, the model, and the next step."""

    def __init__(self, url: str, seed: int) -> None:
        self.rnd = random.Random(seed)
        self.clock = ManualClock()
        self.kernel = Kernel.open(url, migrate_schema=True, clock=self.clock)
        self.postgres = url.startswith("postgresql")
        self.model = Model(self.clock)
        self.seq = 0
        self.claims: list[tuple[int, str, int]] = []
        self.rids: dict[str, str] = {}  # request id -> the action it was made for
        self.tokens: dict[int, list[str]] = defaultdict(list)  # the adapter asks taken
        for job_id in JOBS:
            attempts = self.rnd.randint(1, 3)
            self.kernel.define_job(job_spec(job_id, attempts))
            self.model.jobs[job_id] = MJob(attempts)
            self._fire_now(job_id, 2)
        self.actors = Actors(url, [self.clock] * 3)

    def close(self) -> None:
        self.actors.close()
        self.kernel.close()

    def _next(self, prefix: str) -> str:
        self.seq += 1
        return f"{prefix}{self.seq}"

    def _fire_now(self, job_id: str, n: int) -> None:
        op = self.fire(job_id, n)
        outcome = Outcome(value=op.call(self.kernel))
        op.predict(self.model, outcome)

    # -- operations ------------------------------------------------------------------------

    def fire(self, job_id: str, n: int = 1) -> Op:
        mj = self.model.jobs[job_id]
        seen, keys, cursor = mj.cursor, [self._next("t") for _ in range(n)], self._next("c")
        now = self.clock.now

        def predict(m: Model, outcome: Outcome) -> Any:
            if m.jobs[job_id].cursor != seen or not m.jobs[job_id].enabled:
                return (True, 0)
            created = outcome.value.created if outcome.ok else ()
            if len(created) != n:
                return (False, n)  # the kernel did otherwise: this order does not explain it
            for occ_id, key in zip(created, keys, strict=True):
                m.add(occ_id, job_id, key)
            m.jobs[job_id].cursor = cursor
            return (False, n)

        return Op(
            f"fire({job_id})",
            lambda k: k.fire(
                job_id,
                expected_revision=mj.revision,
                expected_cursor=seen,
                firings=[(key, now) for key in keys],
                next_cursor=(cursor, now + timedelta(hours=1)),
            ),
            predict,
            lambda report: (report.stale, len(report.created)),
        )

    def claim(self, occ_id: int, owner: str) -> Op:
        return Op(
            f"claim({occ_id}, {owner})",
            lambda k: k.claim(occ_id, owner=owner, lease=LEASE_S),
            lambda m, _: m.claim(occ_id, owner),
            _claim_answer,
        )

    def claim_next(self, owner: str) -> Op:
        def predict(m: Model, outcome: Outcome) -> Any:
            if not self.postgres:
                return m.claim_next(owner)
            got = outcome.value if outcome.ok else None
            return m.claim_next_took(owner, None if got is None else got.occurrence.id)

        return Op(
            f"claim_next({owner})",
            lambda k: k.claim_next(owner=owner, lease=LEASE_S),
            predict,
            _claim_answer,
        )

    def renew(self, occ_id: int, owner: str, fence: int) -> Op:
        return Op(
            f"renew({occ_id}, {owner}, {fence})",
            lambda k: k.renew(occ_id, owner=owner, fence=fence, lease=LEASE_S),
            lambda m, _: m.renew(occ_id, owner, fence),
            lambda got: (got.pause.request_id if got.pause else None, got.cancel_requested),
        )

    def settle(self, occ_id: int, owner: str, fence: int, outcome: str) -> Op:
        held = {"owner": owner, "fence": fence}
        call = {
            "succeeded": lambda k: k.succeed(occ_id, **held),
            "cancelled": lambda k: k.cancelled(occ_id, **held),
            "retryable": lambda k: k.fail(occ_id, **held, code="BOOM", message="m"),
            "fatal": lambda k: k.fail(occ_id, **held, code="FATAL", message="m", retryable=False),
        }[outcome]
        reports = outcome in ("retryable", "fatal")  # fail answers where it went

        def predict(m: Model, _: Outcome) -> Any:
            status = m.settle(occ_id, owner, fence, outcome)
            return status if reports else None

        return Op(f"settle({occ_id}, {owner}, {fence}, {outcome})", call, predict)

    def release(self, occ_id: int, owner: str, fence: int, rid: str | None) -> Op:
        point = self.rnd.choice(SAFE_POINTS)
        checkpoint = {"at": point, "fence": fence}
        held = {"owner": owner, "fence": fence, "safe_point": point, "checkpoint": checkpoint}
        if rid is None:
            call: Callable[[Kernel], Any] = lambda k: k.hand_back(occ_id, **held)  # noqa: E731
        else:
            call = lambda k: k.ack_pause(  # noqa: E731
                occ_id, **held, request_id=rid, expected_revision=None
            )
        return Op(
            f"{'ack_pause' if rid else 'hand_back'}({occ_id}, {owner}, {fence})",
            call,
            lambda m, _: m.release(occ_id, owner, fence, point, rid, None),
        )

    def operator(self, action: str, occ_id: int, rid: str | None = None) -> Op:
        """An operator action on ``occ_id``, with the evidence the model holds now."""
        rid = rid or self._next(action)
        self.rids[rid] = action
        o = self.model.occs[occ_id]
        dedup: Callable[[Any], Any] = lambda got: got.deduplicated  # noqa: E731
        if action == "cancel":
            return Op(
                f"cancel({occ_id}, {rid})",
                lambda k: k.cancel(occ_id, request_id=rid, operator="op"),
                lambda m, _: m.cancel(occ_id, rid),
                dedup,
            )
        if action == "pause":
            fence, points = o.fence, self.rnd.choice([SAFE_POINTS[:1], SAFE_POINTS])
            return Op(
                f"pause({occ_id}, {fence}, {rid})",
                lambda k: k.request_pause(
                    occ_id,
                    expected_fence=fence,
                    request_id=rid,
                    safe_points=points,
                    operator="op",
                ),
                lambda m, _: m.request_pause(occ_id, fence, rid, points),
                dedup,
            )
        if action == "resume":
            return Op(
                f"resume({occ_id}, {rid})",
                lambda k: k.resume(occ_id, request_id=rid, operator="op"),
                lambda m, _: m.resume(occ_id, rid, None),
                dedup,
            )
        if action == "requeue":
            fence, code = o.fence, str(o.error)
            return Op(
                f"requeue({occ_id}, {fence}, {code}, {rid})",
                lambda k: k.requeue(
                    occ_id,
                    expected_fence=fence,
                    expected_error_code=code,
                    request_id=rid,
                    operator="op",
                ),
                lambda m, _: m.requeue(occ_id, fence, code, rid),
                dedup,
            )
        assert action == "adjudicate"
        decision = self.rnd.choice(["applied", "not_applied", "abandon"])
        return Op(
            f"adjudicate({occ_id}, {decision}, {rid})",
            lambda k: k.adjudicate(occ_id, decision=decision, request_id=rid, operator="op"),
            lambda m, _: m.adjudicate(occ_id, decision, rid),
            dedup,
        )

    def cancel_job(self, job_id: str) -> Op:
        """``jobs cancel JOB --cascade`` (the model's jobs have no children)."""
        rid = self._next("cancel_job")
        self.rids[rid] = "cancel_job"
        return Op(
            f"cancel_job({job_id}, {rid})",
            lambda k: k.cancel_job(job_id, cascade=True, request_id=rid, operator="op"),
            lambda m, _: m.cancel_job(job_id, rid),
            lambda got: (got.deduplicated, list(got.cancelled), list(got.stopping)),
        )

    def decide(self, occ_id: int, approved: bool) -> Op:
        """An operator approves or rejects an occurrence awaiting approval."""
        action = "approve" if approved else "reject"
        rid = self._next(action)
        self.rids[rid] = action
        return Op(
            f"{action}({occ_id}, {rid})",
            lambda k: getattr(k, action)(occ_id, request_id=rid, operator="op"),
            lambda m, _: m.decide_approval(occ_id, approved, rid),
            lambda got: got.deduplicated,
        )

    def approval_timeouts(self) -> Op:
        """Beat's pass over approvals past their timeout (the gated job's auto approves)."""
        return Op(
            "approval_timeouts",
            lambda k: k.apply_approval_timeouts(),
            lambda m, _: m.approval_timeouts(),
        )

    def ask_adapter(self, occ_id: int) -> Op:
        """A worker takes the ask about an uncertain run (the kernel makes its token)."""

        def predict(m: Model, outcome: Outcome) -> Any:
            got = outcome.value if outcome.ok else None
            return m.ask_adapter(occ_id, got.token if got else "-", ASK_WINDOW_S * 1000)

        return Op(
            f"ask_adapter({occ_id})",
            lambda k: k.ask_adapter(occ_id, asker="w-ask", window=ASK_WINDOW_S),
            predict,
            lambda got: got is not None,
        )

    def adapter_answers(self, occ_id: int, token: str) -> Op:
        """The asked adapter's answer: applied, not_applied, or cannot tell."""
        answer = self.rnd.choice(["applied", "not_applied", "cannot_tell"])
        if answer == "cannot_tell":
            return Op(
                f"adapter_cannot_tell({occ_id}, {token[:6]})",
                lambda k: k.adapter_cannot_tell(occ_id, token=token, reason="unknown"),
                lambda m, _: m.adapter_cannot_tell(occ_id, token),
            )
        verdict = Verdict(Decision(answer), {"asked": token[:6]})
        return Op(
            f"adapter_adjudicates({occ_id}, {token[:6]}, {answer})",
            lambda k: k.adapter_adjudicates(occ_id, token=token, verdict=verdict),
            lambda m, _: m.adapter_adjudicates(occ_id, token, answer),
            lambda _: None,
        )

    def expire(self) -> Op:
        return Op("expire_leases", lambda k: k.expire_leases(), lambda m, _: m.expire())

    def dispatch(self) -> Op:
        """Beat's pump: marks hints only (``dispatched_at``, which the model does not track)."""
        return Op("dispatch", lambda k: k.dispatch_batch(), lambda m, _: None, lambda _: None)

    # -- choosing a step ----------------------------------------------------------------------

    def candidates(self, o: MOcc) -> list[Op]:
        """Operations that can move ``o`` now, by its holder, an operator, Beat or a claimer."""
        ops = [self.claim(o.id, self.rnd.choice(OWNERS))]
        if self.rnd.random() < 0.3:  # often enough to race everything, not to end every walk
            ops.append(self.operator("cancel", o.id))
        enabled = [j for j, mj in self.model.jobs.items() if mj.enabled]
        if o.job_id in enabled and len(enabled) > 2 and self.rnd.random() < 0.1:
            ops.append(self.cancel_job(o.job_id))  # two jobs stay enabled to keep work coming
        if o.status == "awaiting_approval":
            ops.append(self.decide(o.id, self.rnd.random() < 0.7))
        if o.owner is not None:
            held = (o.id, o.owner, o.fence)
            ops += [self.renew(*held), self.release(*held, None)]
            outcomes = ["succeeded", "retryable", "fatal"] + ["cancelled"] * o.cancel_requested
            ops.append(self.settle(*held, self.rnd.choice(outcomes)))
            c = o.control
            if c is not None and c.state == "pause_requested":
                ops.append(self.release(*held, c.pause_rid))
            ops.append(self.operator("pause", o.id))
        if o.control is not None and o.control.state == "paused":
            ops.append(self.operator("resume", o.id))
        if o.status == "dead_letter":
            ops.append(self.operator("requeue", o.id))
        if o.status == "needs_adjudication":
            # Two workers may ask at once (a hint delivered twice); answers race the operator.
            ops += [self.operator("adjudicate", o.id), self.ask_adapter(o.id)]
            ops += [self.ask_adapter(o.id)] * (self.rnd.random() < 0.5)
        for _ in range(2 if self.tokens[o.id] else 0):  # the latest ask's answer, or a stale one's
            ops.append(self.adapter_answers(o.id, self.rnd.choice(self.tokens[o.id][-2:])))
        stale = [c for c in self.claims if c[0] == o.id and c[1:] != (o.owner, o.fence)]
        if stale:  # a holder that lost its claim still writes
            ops.append(self.settle(*self.rnd.choice(stale), "succeeded"))
        return ops

    def step_ops(self) -> tuple[list[Op], int]:
        """Two or three operations, most on one target occurrence; and the target."""
        unsettled = [
            o
            for o in self.model.occs.values()
            if o.status
            in (*RUNNABLE, "running", "needs_adjudication", "dead_letter", "awaiting_approval")
        ]
        target = self.rnd.choice(unsettled or list(self.model.occs.values()))
        pool = self.candidates(target)
        ops = self.rnd.sample(pool, min(len(pool), self.rnd.choice([2, 2, 3])))
        extra: list[Callable[[], Op]] = [
            self.expire,
            self.approval_timeouts,
            self.dispatch,
            lambda: self.claim_next(self.rnd.choice(OWNERS)),
            lambda: self.fire(self.rnd.choice(list(JOBS))),
        ]
        if len(unsettled) < 4:  # keep work flowing in
            enabled = [j for j, mj in self.model.jobs.items() if mj.enabled]
            ops[-1:] = [self.fire(self.rnd.choice(enabled))]
        while len(ops) < 2 or self.rnd.random() < 0.3 and len(ops) < 3:
            ops.append(self.rnd.choice(extra)())
        if self.rnd.random() < 0.15:  # one request id used twice at once
            twice = [op for op in ops if op.name.split("(")[0] in self.rids.values()]
            if twice:
                ops[-1] = twice[0]
        if self.postgres:
            # SKIP LOCKED makes claim_next pass over whatever a concurrent op (or the held
            # target) has locked, so which expired leases it settles on the way is not a
            # function of any serial order. It runs alone here; claim_next racing other
            # writers is covered by test_interleavings' two-claimers and expiry races.
            alone = [op for op in ops if op.name.startswith("claim_next")]
            if alone:
                return alone[:1], -1
        return ops, target.id

    # -- one step ------------------------------------------------------------------------------

    def step(self, number: int) -> None:
        ops, target = self.step_ops()
        calls = [op.call for op in ops] + [_noop] * (3 - len(ops))
        hold = target if number % 2 == 0 and target >= 0 else None
        outcomes = self.actors.run(*calls, hold=hold)[: len(ops)]
        refusals_are_kernel_errors(outcomes)
        snap = snapshot(self.kernel)
        self.model = self.linearise(ops, outcomes, snap, number)
        for op, outcome in zip(ops, outcomes, strict=True):
            got = outcome.value
            if outcome.ok and op.name.startswith("claim") and got is not None:
                self.claims.append((got.occurrence.id, got.owner, got.fence))
            if outcome.ok and op.name.startswith("ask_adapter") and got is not None:
                self.tokens[got.occurrence.id].append(got.token)
        for state in _states(snap):
            found = problems(state, self.clock.ms)
            assert not found, f"step {number}: occurrence {state['occurrence']['id']}: {found}"
        self.clock.advance(self.rnd.choice([0, 0, 1, 11, LEASE_S + 1]))

    def linearise(
        self, ops: list[Op], outcomes: list[Outcome], snap: Snapshot, number: int
    ) -> Model:
        """The model after ``ops`` in the first serial order that explains what happened."""
        tried = []
        for order in itertools.permutations(range(len(ops))):
            model = copy.deepcopy(self.model, {id(self.clock): self.clock})
            why = None
            for i in order:
                op, outcome = ops[i], outcomes[i]
                try:
                    expected, code = op.predict(model, outcome), None
                except Refused as refusal:
                    expected, code = None, refusal.code
                if code != outcome.code:
                    why = f"{op.name}: model {code}, kernel {outcome!r}"
                elif code is None and op.answer(outcome.value) != expected:
                    why = f"{op.name}: model {expected!r}, kernel {op.answer(outcome.value)!r}"
                if why:
                    break
            why = why or _differs(model, snap)
            if why is None:
                return model
            tried.append(f"  order {[ops[i].name for i in order]}: {why}")
        raise AssertionError(
            f"step {number}: no serial order explains the outcome\n"
            + "\n".join(
                f"  {op.name} -> {outcome!r}" for op, outcome in zip(ops, outcomes, strict=True)
            )
            + "\n"
            + "\n".join(tried)
        )


def _noop(kernel: Kernel) -> None:
    """What an idle actor does in a step with fewer operations than actors."""


def _states(snap: Snapshot) -> Iterator[dict[str, Any]]:
    """Per occurrence, the rows :func:`interleave.problems` reads, out of a snapshot."""
    controls = {c["occurrence_id"]: c for c in snap["controls"]}
    grants, events = defaultdict(list), defaultdict(list)
    for g in snap["requeue_grants"]:
        grants[g["occurrence_id"]].append(g)
    for e in snap["events"]:
        if e["occurrence_id"] is not None:
            events[e["occurrence_id"]].append((e["type"], json.loads(e["data"]) | e))
    for o in snap["occurrences"]:
        yield {
            "occurrence": o,
            "control": controls.get(o["id"]),
            "grants": grants[o["id"]],
            "events": events[o["id"]],
        }


def _differs(model: Model, snap: Snapshot) -> str | None:
    """How the tables differ from ``model`` (None: they agree)."""
    rows = {r["id"]: r for r in snap["occurrences"]}
    controls = {r["occurrence_id"]: r for r in snap["controls"]}
    grants: dict[int, list[int]] = defaultdict(list)
    for g in snap["requeue_grants"]:
        if g["claimed_at"] is None:
            grants[g["occurrence_id"]].append(g["expected_fence"])
    if set(rows) != set(model.occs):
        return f"occurrences {sorted(rows)}, model {sorted(model.occs)}"
    for occ_id, o in model.occs.items():
        r, c, m = rows[occ_id], controls.get(occ_id), o.control
        error = json.loads(r["last_error"])["code"] if r["last_error"] else None
        got: tuple[Any, ...] = (r["status"], r["attempt"], r["fence"], r["lease_owner"])
        got += (r["lease_expires_at"], r["available_at"], bool(r["cancel_requested"]), error)
        want: tuple[Any, ...] = (o.status, o.attempt, o.fence, o.owner, o.lease_until)
        want += (o.available_at, o.cancel_requested, o.error)
        if got != want:
            return f"occurrence {occ_id}: kernel {got}, model {want}"
        got_c = c and (c["state"], c["revision"], c["expected_fence"], c["pause_request_id"])
        want_c = m and (m.state, m.revision, m.fence, m.pause_rid)
        if got_c != want_c:
            return f"occurrence {occ_id} control: kernel {got_c}, model {want_c}"
        if grants.get(occ_id, []) != ([] if o.grant_fence is None else [o.grant_fence]):
            return f"occurrence {occ_id}: grants {grants.get(occ_id)}, model {o.grant_fence}"
    return None


@pytest.mark.parametrize("seed", SEEDS)
def test_concurrent_lifecycle_is_linearisable(kernel_url: str, seed: int) -> None:
    walk = Walk(kernel_url, seed)
    try:
        for number in range(STEPS):
            walk.step(number)
    finally:
        walk.close()
