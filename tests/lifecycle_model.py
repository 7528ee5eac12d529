"""A plain-Python model of the occurrence lifecycle (SPEC §4) for the kernel state-machine test.

It predicts what each kernel call answers and what the tables hold afterwards;
``tests/kernel/test_state_machine.py`` drives the kernel and this model side by side.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernel.occurrences.adapter_verdicts import MAX_ASKS
from kernel.store import Kernel
from kernel.testing import ManualClock

LEASE_S = 30
OWNERS = ("w1", "w2", "w3")
SAFE_POINTS = ("before_execute", "adapter_checkpoint")
JOBS = {
    "alo": "at-least-once",
    "amo": "at-most-once",
    "alo-b": "at-least-once",
    "gate": "at-least-once",
}
#: Jobs whose firings await approval; the timeout approves (run-now is never held).
GATED = {"gate": {"required": True, "timeout": "60s", "auto": "approve", "max_pending": 10000}}
APPROVAL_TIMEOUT_S = 60
#: The jobs' ``max_lost_leases``: small, so that walks reach the poison-pill bound.
MAX_LOST_LEASES = 1
RUNNABLE = ("queued", "retry_wait")
SETTLED = ("succeeded", "dead_letter", "cancelled", "skipped")
#: After these an at-most-once occurrence may be claimed again: its holder reported
#: the run's outcome, or an operator decided (I6).
KNOWN_OUTCOME = {
    f"occurrence_{e}" for e in ("retry_wait", "paused", "handed_back", "adjudicated", "requeued")
}
#: A worker write made right (None, mostly), by a stale (owner, fence) or by a wrong owner.
FAULTS = [None, None, None, "stale", "intruder"]
TABLES = {"jobs": "id", "occurrences": "id", "controls": "occurrence_id", "events": "id"}
TABLES |= {"requeue_grants": "request_id", "operator_requests": "request_id"}
STATE_TABLES = ("jobs", "occurrences", "controls", "requeue_grants")

Snapshot = dict[str, list[dict[str, Any]]]


def job_spec(
    job_id: str, max_attempts: int, tag: int = 0, max_lost_leases: int = MAX_LOST_LEASES
) -> dict[str, Any]:
    """A callable job; ``tag`` changes the payload (a new revision) and nothing the model tracks."""
    return {
        "id": job_id,
        "kind": "callable",
        "payload": {"callable": "jobs.sample:run", "args": [tag]},
        "overlap": "allow",
        "max_queued": 10000,  # the model does not track admission's backlog bound
        "delivery": JOBS[job_id],
        "max_attempts": max_attempts,
        "max_lost_leases": max_lost_leases,
        "lease": f"{LEASE_S}s",
        "retry": {"backoff": "10s", "factor": 2, "max": "1h", "jitter": 0},
        **({"approval": GATED[job_id]} if job_id in GATED else {}),
    }


def snapshot(kernel: Kernel) -> Snapshot:
    """Every row of every table the lifecycle touches."""
    with kernel.engine.connect() as conn:
        return {
            table: [
                dict(r)
                for r in conn.exec_driver_sql(f"SELECT * FROM {table} ORDER BY {key}").mappings()
            ]
            for table, key in TABLES.items()
        }


class Refused(Exception):
    """The model's prediction that the kernel refuses with ``code``."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


@dataclass
class MControl:
    state: str
    revision: int
    fence: int
    pause_rid: str | None
    checkpoint: Any
    safe_points: tuple[str, ...] = ()


@dataclass
class MOcc:
    id: int
    delivery: str
    max_attempts: int
    available_at: int
    status: str = "queued"
    attempt: int = 0
    lost_leases: int = 0  # reclaims after an expired lease (they spend no attempt)
    fence: int = 0
    owner: str | None = None
    lease_until: int | None = None
    cancel_requested: bool = False
    error: str | None = None
    control: MControl | None = None
    grant_fence: int | None = None  # an unused requeue/adjudication grant, valid at this fence
    approval_due: int | None = None  # while awaiting approval: when the timeout approves
    created_status: str = "queued"
    job_id: str = ""
    manual: bool = False  # made by run-now: claimable while its job is disabled
    ask: MAsk | None = None  # the adapter's ask about an uncertain run


@dataclass
class MAsk:
    """A worker's ask of the adapter about the uncertain run at ``fence``."""

    fence: int
    token: str
    asks: int
    deadline: int
    state: str = "asking"  # or cannot_tell


#: What a job cancel ends (waiting) or asks to stop (running).
JOB_CANCEL_ENDS = (*RUNNABLE, "awaiting_approval", "running")


@dataclass
class MJob:
    max_attempts: int
    revision: int = 1
    cursor: str | None = None
    enabled: bool = True


class Model:
    """SPEC §4 in plain Python. A method raises Refused before it changes anything."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.jobs: dict[str, MJob] = {}
        self.keys: dict[str, list[str]] = defaultdict(list)
        self.occs: dict[int, MOcc] = {}
        self.requests: dict[str, tuple[str, str, dict[str, Any]]] = {}
        #: The job revision each run-now request ran (a replay after a revision is refused).
        self.run_now_revisions: dict[str, int] = {}

    @property
    def now(self) -> int:
        return self.clock.ms

    def live(self, o: MOcc) -> bool:
        """Running under a lease that has not expired."""
        return o.lease_until is not None and o.lease_until > self.now

    def add(self, occ_id: int, job_id: str, key: str, *, fired: bool = True) -> None:
        """A new occurrence; a fired one of a gated job awaits approval."""
        self.keys[job_id].append(key)
        o = MOcc(occ_id, JOBS[job_id], self.jobs[job_id].max_attempts, self.now)
        o.job_id, o.manual = job_id, not fired
        if fired and job_id in GATED:
            o.status = o.created_status = "awaiting_approval"
            o.approval_due = self.now + APPROVAL_TIMEOUT_S * 1000
        self.occs[occ_id] = o

    # -- claims -------------------------------------------------------------------------

    def _claimable(self, o: MOcc) -> tuple[bool, bool] | None:
        """(free, resuming) when a claim would take ``o`` now, else None."""
        c = o.control
        if (c is not None and c.state == "paused") or o.cancel_requested:
            return None
        if not (self.jobs[o.job_id].enabled or o.manual):
            return None  # a disabled job's runs wait (run-now's excepted)
        if self._unresolved_in_job(o):
            return None  # an at-most-once run whose outcome is unknown holds its job back
        if o.status in RUNNABLE:
            due = o.available_at <= self.now
        else:
            due = (
                o.status == "running"
                and o.delivery == "at-least-once"
                and not self.live(o)
                and o.lost_leases < MAX_LOST_LEASES
            )
        reclaiming = o.status == "running"
        # A reclaim is the same attempt: its worker was lost, the task did not fail.
        resuming = c is not None and c.state == "resumed" and (reclaiming or c.fence == o.fence)
        free = resuming or (o.status == "retry_wait" and o.grant_fence == o.fence) or reclaiming
        if not due or (not free and o.attempt >= o.max_attempts):
            return None
        return free, resuming

    def _unresolved_in_job(self, o: MOcc) -> bool:
        """Another occurrence of ``o``'s job waits for a verdict on its outcome."""
        return any(
            other.job_id == o.job_id and other.id != o.id and other.status == "needs_adjudication"
            for other in self.occs.values()
        )

    def claim(self, occ_id: int, owner: str) -> tuple[int, int, bool] | None:
        """(occurrence, new fence, resuming), or None: not claimable now (an expired
        lease whose expiry decides its end is settled, as lease expiry would)."""
        o = self.occs[occ_id]
        if o.status == "running" and not self.live(o) and self._expire_one(o) is not None:
            return None
        got = self._claimable(o)
        if got is None:
            return None
        free, resuming = got
        if free and not resuming:
            o.grant_fence = None
        o.lost_leases += o.status == "running"
        o.fence, o.attempt = o.fence + 1, o.attempt + (not free)
        o.status, o.owner, o.lease_until = "running", owner, self.now + LEASE_S * 1000
        if o.control is not None and o.control.state == "pause_requested":
            o.control.fence, o.control.revision = o.fence, o.control.revision + 1
        return occ_id, o.fence, resuming

    def claim_next(self, owner: str) -> tuple[int, int, bool] | None:
        """The oldest waiting occurrence that a claim takes, else the oldest expired lease
        (settling, on the way, the expired leases whose expiry decides their end)."""
        for group in self._claim_next_groups():
            for o in group:
                got = self.claim(o.id, owner)
                if got is not None:
                    return got
        return None

    def claim_next_took(self, owner: str, occ_id: int | None) -> tuple[int, int, bool] | None:
        """What claim_next did when it took ``occ_id`` (None: nothing), where it may skip
        rows (PostgreSQL's SKIP LOCKED): expired leases met before it are settled too."""
        waiting, expired = self._claim_next_groups()
        if occ_id is not None and occ_id in {o.id for o in waiting}:
            return self.claim(occ_id, owner)
        for o in expired:
            if o.id == occ_id:
                return self.claim(occ_id, owner)
            self._expire_one(o)
        return None if occ_id is None else self.claim(occ_id, owner)

    def _claim_next_groups(self) -> tuple[list[MOcc], list[MOcc]]:
        def oldest(group: list[MOcc]) -> list[MOcc]:
            return sorted(group, key=lambda o: (o.available_at, o.id))

        waiting = [
            o for o in self.occs.values() if o.status in RUNNABLE and not self._unresolved_in_job(o)
        ]
        expired = [o for o in self.occs.values() if o.status == "running" and not self.live(o)]
        return oldest(waiting), oldest(expired)

    # -- the holder's writes --------------------------------------------------------------

    def _held(self, o: MOcc, owner: str, fence: int) -> None:
        if not (o.status == "running" and o.owner == owner and o.fence == fence and self.live(o)):
            raise Refused("LEASE_LOST")

    def _leave(self, o: MOcc, status: str, error: str | None) -> None:
        o.status, o.owner, o.lease_until, o.error = status, None, None, error
        if status in SETTLED and o.control is not None and o.control.state != "terminal":
            o.control.state, o.control.revision = "terminal", o.control.revision + 1

    def renew(self, occ_id: int, owner: str, fence: int) -> tuple[str | None, bool]:
        """(pending pause request id, cancel requested)."""
        o = self.occs[occ_id]
        self._held(o, owner, fence)
        o.lease_until = self.now + LEASE_S * 1000
        c = o.control
        pending = c is not None and c.state == "pause_requested" and c.fence == fence
        return (c.pause_rid if c is not None and pending else None), o.cancel_requested

    def settle(self, occ_id: int, owner: str, fence: int, outcome: str) -> str:
        o = self.occs[occ_id]
        self._held(o, owner, fence)
        status, error = {
            "succeeded": ("succeeded", None),
            "cancelled": ("cancelled", "CANCELLED"),
            "fatal": ("dead_letter", "FATAL"),
            "retryable": ("retry_wait", "BOOM"),
        }[outcome]
        if status == "retry_wait" and o.attempt >= o.max_attempts:
            status = "dead_letter"
        if status == "retry_wait" and o.cancel_requested:
            status = "cancelled"  # a pending cancel wins over a retry nobody could claim
        backoff_s = min(10 * 2 ** (o.attempt - 1), 3600) if status == "retry_wait" else 0
        o.available_at = self.now + backoff_s * 1000
        self._leave(o, status, error)
        if status == "retry_wait" and o.control is not None and o.control.state != "terminal":
            # Any settle ends the control (a pending pause request included).
            o.control.state, o.control.revision = "terminal", o.control.revision + 1
        return status

    def release(
        self, occ_id: int, owner: str, fence: int, point: str, rid: str | None, rev: int | None
    ) -> None:
        """Acknowledge pause ``rid`` (expecting control revision ``rev``), or hand back."""
        o, c = self.occs[occ_id], self.occs[occ_id].control
        if rid is not None:
            if c is None or c.state != "pause_requested" or c.pause_rid != rid:
                raise Refused("STATE_CONFLICT")
            if rev is not None and c.revision != rev:
                raise Refused("REVISION_CONFLICT")
            if c.fence != fence:
                raise Refused("LEASE_LOST")
            if point not in c.safe_points:
                raise Refused("PAUSE_UNSUPPORTED")
        self._held(o, owner, fence)
        o.available_at = self.now
        if o.cancel_requested:
            self._leave(o, "cancelled", "CANCELLED")
            return
        self._leave(o, "retry_wait", o.error)
        checkpoint = {"at": point, "fence": fence}
        # A pause pending for this run is honoured by any hand back at a safe point.
        state = "paused" if c is not None and c.state == "pause_requested" else "resumed"
        if c is None:
            o.control = MControl(state, 1, fence, None, checkpoint, (point,))
        else:
            c.state, c.revision, c.fence, c.checkpoint = state, c.revision + 1, fence, checkpoint

    def expire(self) -> dict[str, int]:
        counts = {"cancelled": 0, "needs_adjudication": 0, "dead_letter": 0}
        for o in self.occs.values():
            if o.status == "running" and not self.live(o):
                status = self._expire_one(o)
                if status is not None:
                    counts[status] += 1
        return counts

    def _expire_one(self, o: MOcc) -> str | None:
        """Settle an expired lease that decides its own end; its new status, else None."""
        if o.cancel_requested:
            status, error = "cancelled", None
        elif o.delivery == "at-most-once":
            status, error = "needs_adjudication", "LEASE_EXPIRED"
        elif o.lost_leases >= MAX_LOST_LEASES:
            status, error = "dead_letter", "POISON_PILL"
        else:
            return None
        self._leave(o, status, error)
        return status

    # -- operators: each returns ``deduplicated`` -------------------------------------------

    def _request(
        self,
        rid: str,
        action: str,
        target: str,
        evidence: dict[str, Any],
        apply: Callable[[], None],
    ) -> bool:
        """A replay with the same evidence is deduplicated, with other evidence refused (I7)."""
        seen = self.requests.get(rid)
        if seen is not None and seen != (action, target, evidence):
            raise Refused("EVIDENCE_CONFLICT")
        if seen is None:
            apply()
            self.requests[rid] = (action, target, evidence)
        return seen is not None

    def run_now(self, job_id: str, rid: str) -> bool:
        revision = self.jobs[job_id].revision
        replay = self.requests.get(rid) == ("run_now", job_id, {})
        if replay and self.run_now_revisions[rid] != revision:
            raise Refused("REVISION_CONFLICT")
        self.run_now_revisions.setdefault(rid, revision)
        return self._request(rid, "run_now", job_id, {}, lambda: None)

    def request_pause(self, occ_id: int, fence: int, rid: str, points: tuple[str, ...]) -> bool:
        o = self.occs[occ_id]

        def apply() -> None:
            c = o.control
            if not points:
                raise Refused("PAUSE_UNSUPPORTED")
            if (c is not None and c.state not in ("terminal", "resumed")) or o.status != "running":
                raise Refused("STATE_CONFLICT")
            if o.fence != fence:
                raise Refused("FENCE_CONFLICT")
            if not self.live(o):
                raise Refused("LEASE_LOST")
            revision, checkpoint = (c.revision + 1, c.checkpoint) if c else (1, None)
            o.control = MControl("pause_requested", revision, fence, rid, checkpoint, points)

        return self._request(rid, "pause", str(occ_id), {"fence": fence}, apply)

    def resume(self, occ_id: int, rid: str, rev: int | None) -> bool:
        o = self.occs[occ_id]

        def apply() -> None:
            c = o.control
            if c is None or c.state != "paused":
                raise Refused("STATE_CONFLICT")
            if rev is not None and c.revision != rev:
                raise Refused("REVISION_CONFLICT")
            c.state, c.revision, o.available_at = "resumed", c.revision + 1, self.now

        return self._request(rid, "resume", str(occ_id), {"revision": rev}, apply)

    def requeue(self, occ_id: int, fence: int, code: str, rid: str) -> bool:
        o = self.occs[occ_id]

        def apply() -> None:
            if o.status != "dead_letter":
                raise Refused("STATE_CONFLICT")
            if o.fence != fence:
                raise Refused("FENCE_CONFLICT")
            if o.error != code:
                raise Refused("EVIDENCE_CONFLICT")
            o.status, o.available_at, o.grant_fence = "retry_wait", self.now, o.fence
            o.cancel_requested = False  # the operator revived it: an old cancel request is spent

        evidence = {"fence": fence, "error_code": code}
        return self._request(rid, "requeue", str(occ_id), evidence, apply)

    def adjudicate(self, occ_id: int, decision: str, rid: str) -> bool:
        o = self.occs[occ_id]

        def apply() -> None:
            if o.status != "needs_adjudication":
                raise Refused("STATE_CONFLICT")
            o.available_at = self.now
            if decision == "not_applied":  # runnable again; the next claim costs no attempt
                o.status, o.grant_fence = "retry_wait", o.fence
            else:
                self._leave(
                    o,
                    *{"applied": ("succeeded", o.error), "abandon": ("dead_letter", "ABANDONED")}[
                        decision
                    ],
                )

        return self._request(rid, "adjudicate", str(occ_id), {"decision": decision}, apply)

    # -- the adapter, asked by a worker about an uncertain run ----------------------------------

    def ask_adapter(self, occ_id: int, token: str, window_ms: int) -> bool:
        """Take the run's one live ask: its first, or again once the last expired
        unanswered (at most MAX_ASKS); False when it is not to be asked now."""
        o = self.occs[occ_id]
        a = o.ask
        if o.status != "needs_adjudication":
            return False
        if a is not None and a.fence == o.fence:
            if not (a.state == "asking" and a.deadline <= self.now and a.asks < MAX_ASKS):
                return False
            asks = a.asks + 1
        else:
            asks = 1
        o.ask = MAsk(o.fence, token, asks, self.now + window_ms)
        return True

    def _live_ask(self, o: MOcc, token: str) -> MAsk:
        """The ask ``token`` while it may answer, else the refusal an answer gets."""
        if o.status != "needs_adjudication":
            raise Refused("STATE_CONFLICT")  # decided first (an operator, another answer)
        a = o.ask
        if a is None:
            raise Refused("NOT_FOUND")
        if (a.token, a.state, a.fence) != (token, "asking", o.fence) or a.deadline <= self.now:
            raise Refused("LEASE_LOST")
        return a

    def adapter_adjudicates(self, occ_id: int, token: str, decision: str) -> None:
        o = self.occs[occ_id]
        self._live_ask(o, token)
        o.available_at = self.now
        if decision == "not_applied":  # as an operator's: runnable, the next claim is free
            o.status, o.grant_fence = "retry_wait", o.fence
        else:
            self._leave(o, "succeeded", o.error)

    def adapter_cannot_tell(self, occ_id: int, token: str) -> None:
        """Nobody asks again about this run; the operator decides."""
        self._live_ask(self.occs[occ_id], token).state = "cannot_tell"

    def cancel(self, occ_id: int, rid: str) -> bool:
        o = self.occs[occ_id]

        def apply() -> None:
            if o.status == "running":
                o.cancel_requested = True
            elif o.status in (*RUNNABLE, "awaiting_approval"):
                o.approval_due = None
                self._leave(o, "cancelled", o.error)
            else:
                raise Refused("STATE_CONFLICT")

        return self._request(rid, "cancel", str(occ_id), {}, apply)

    def cancel_job(self, job_id: str, rid: str) -> tuple[bool, list[int], list[int]]:
        """Disable the job, end its waiting occurrences, ask its running ones to stop:
        (deduplicated, cancelled, stopping). The model's jobs are not chained, so a
        cascade is the job alone."""
        cancelled: list[int] = []
        stopping: list[int] = []

        def apply() -> None:
            job = self.jobs[job_id]
            job.enabled, job.cursor = False, None
            for o in sorted(self.occs.values(), key=lambda o: o.id):
                if o.job_id != job_id or o.status not in JOB_CANCEL_ENDS:
                    continue
                if o.status == "running":
                    o.cancel_requested = True
                    stopping.append(o.id)
                else:
                    o.approval_due = None
                    self._leave(o, "cancelled", o.error)
                    cancelled.append(o.id)

        dedup = self._request(rid, "cancel_job", job_id, {"cascade": True}, apply)
        return dedup, cancelled, stopping

    def decide_approval(self, occ_id: int, approved: bool, rid: str) -> bool:
        o = self.occs[occ_id]

        def apply() -> None:
            if o.status != "awaiting_approval":
                raise Refused("STATE_CONFLICT")
            o.approval_due = None
            if approved:
                o.status, o.available_at = "queued", self.now
            else:
                self._leave(o, "skipped", o.error)

        return self._request(rid, "approve" if approved else "reject", str(occ_id), {}, apply)

    def approval_timeouts(self) -> dict[str, int]:
        """Beat's pass: every overdue approval is approved (the gated job's auto action)."""
        due = [o for o in self.occs.values() if o.approval_due is not None]
        due = [o for o in due if o.approval_due is not None and o.approval_due <= self.now]
        for o in due:
            o.status, o.available_at, o.approval_due = "queued", self.now, None
        return {"approved": len(due), "rejected": 0}


def asked(o: MOcc) -> bool:
    """An operator asked something of this occurrence's holder (cancel, pause)."""
    return o.cancel_requested or (o.control is not None and o.control.state == "pause_requested")
