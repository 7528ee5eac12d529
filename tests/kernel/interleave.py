"""Run kernel operations really at once: actor threads, each with its own Kernel, one database.

:class:`Actors` keeps one thread per actor, each owning a :class:`~kernel.store.Kernel` with
its own engine and connections, and releases them together at a barrier per round. On
PostgreSQL a round can also *hold* an occurrence's row lock from a side connection until
every actor has either finished or queued behind that lock: every actor has then made its
reads, and the writes land one after another on the row they all read. That is the window
a read-decide-write transition loses in, made certain instead of lucky.

:class:`Stage` builds what a round starts from (queued, running, paused, dead-lettered,
awaiting adjudication) through the public API, and :func:`problems` /
:func:`occurrence_state` check one occurrence after a round: nothing stuck, the event log
naming the state.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from kernel import KernelError
from kernel.db.engine import create_kernel_engine
from kernel.store import Kernel
from kernel.testing import ManualClock
from kernel.types import Claim

__all__ = [
    "Outcome",
    "Actors",
    "Stage",
    "JOB_SPECS",
    "counter_problems",
    "job_spec",
    "LEASE_S",
    "race_rounds",
    "SAFE_POINTS",
    "SETTLED",
    "occurrence_state",
    "problems",
    "status_named_by",
]

LEASE_S = 30
SAFE_POINTS = ("before_execute", "adapter_checkpoint")
SETTLED = ("succeeded", "dead_letter", "cancelled", "skipped")
#: How long a held row lock waits for the actors to queue behind it before letting go.
_HOLD_LIMIT_S = 5.0
#: A round whose actors have not all answered by then is stuck (the statement timeout is 30 s).
_STUCK_AFTER_S = 10.0

Op = Callable[[Kernel], Any]


def race_rounds(postgres: bool, rounds: int) -> int:
    """Rounds of a race test: ``rounds`` on PostgreSQL, 5 on SQLite (which serialises
    writers, so its rounds only prove the same answers), or ``KERNEL_RACE_ROUNDS``."""
    return int(os.environ.get("KERNEL_RACE_ROUNDS", "0")) or (rounds if postgres else 5)


@dataclass(frozen=True)
class Outcome:
    """What one actor's call did: returned ``value``, was refused, or crashed."""

    value: Any = None
    refusal: KernelError | None = None
    crash: str | None = None  # the traceback of anything that is not a KernelError
    #: From the barrier's release to the answer: says whether a refusal waited on a lock.
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.refusal is None and self.crash is None

    @property
    def code(self) -> str | None:
        return self.refusal.code if self.refusal is not None else None

    def __repr__(self) -> str:
        if self.crash is not None:
            return f"crash({self.crash.strip().splitlines()[-1]})"
        if self.refusal is not None:
            return f"refused({self.refusal.code} after {self.seconds:.1f} s: {self.refusal})"
        return f"ok({self.value!r:.200})"


def refusals_are_kernel_errors(outcomes: Sequence[Outcome]) -> None:
    """Every refusal is a KernelError with a code; anything else reached the caller raw."""
    for outcome in outcomes:
        assert outcome.crash is None, f"a raw error crossed the kernel boundary:\n{outcome.crash}"
        if outcome.refusal is not None:
            assert outcome.refusal.code, f"a KernelError without a code: {outcome.refusal!r}"


class Actors:
    """One thread and one Kernel per clock in ``clocks``, all on the database at ``url``."""

    def __init__(self, url: str, clocks: Sequence[ManualClock]) -> None:
        self.url = url
        self.postgres = url.startswith("postgresql")
        self.kernels = [Kernel.open(url, clock=clock) for clock in clocks]
        self._barrier = threading.Barrier(len(clocks))
        self._inboxes: list[queue.SimpleQueue[Op | None]] = []
        self._results: queue.SimpleQueue[tuple[int, Outcome]] = queue.SimpleQueue()
        self._threads = []
        self._side = create_kernel_engine(url) if self.postgres else None
        for index, kernel in enumerate(self.kernels):
            inbox: queue.SimpleQueue[Op | None] = queue.SimpleQueue()
            thread = threading.Thread(
                target=self._serve, args=(index, kernel, inbox), name=f"actor-{index}", daemon=True
            )
            self._inboxes.append(inbox)
            self._threads.append(thread)
            thread.start()

    def _serve(self, index: int, kernel: Kernel, inbox: queue.SimpleQueue[Op | None]) -> None:
        while (op := inbox.get()) is not None:
            try:
                self._barrier.wait(timeout=30)
                started = time.monotonic()
                outcome = Outcome(value=op(kernel))
            except KernelError as refusal:
                outcome = Outcome(refusal=refusal, seconds=time.monotonic() - started)
            except BaseException:  # noqa: BLE001 - reported to the test as a crash
                outcome = Outcome(crash=traceback.format_exc())
            self._results.put((index, outcome))

    def run(
        self, *ops: Op, hold: int | str | None = None, hold_table: str = "occurrences"
    ) -> list[Outcome]:
        """Run ``ops[i]`` on actor i, all released at once; outcomes in the order of ``ops``.

        ``hold`` (PostgreSQL only; ignored on SQLite, whose writers are serial anyway):
        lock that occurrence's row (the row of that id in ``hold_table``) first and keep
        it until every actor is done or waits.
        """
        assert len(ops) == len(self.kernels), "one operation per actor"
        with self._held(hold, hold_table) as waiting_for:
            for inbox, op in zip(self._inboxes, ops, strict=True):
                inbox.put(op)
            got: dict[int, Outcome] = {}
            if waiting_for is not None:
                deadline = time.monotonic() + _HOLD_LIMIT_S
                while waiting_for() + len(got) < len(ops) and time.monotonic() < deadline:
                    self._collect(got, timeout=0.0005)
        deadline = time.monotonic() + _STUCK_AFTER_S
        while len(got) < len(ops) and time.monotonic() < deadline:
            self._collect(got, timeout=0.5)
        if len(got) < len(ops):
            # Stuck: say who waits on whom (shown with the test's failure, which a
            # statement timeout then causes) while it still can be seen.
            print(f"actors stuck for {_STUCK_AFTER_S} s; sessions: {self.lock_waits()}")
            while len(got) < len(ops):
                self._collect(got, timeout=60)
        return [got[i] for i in range(len(ops))]

    def lock_waits(self) -> list[dict[str, Any]]:
        """Every session of this database: whom it waits for, its row and transaction locks."""
        if self._side is None:
            return []
        query = sa.text(
            "SELECT a.pid, pg_blocking_pids(a.pid) AS blocked_by, a.state, a.wait_event_type,"
            " a.wait_event, a.xact_start, left(a.query, 300) AS query,"
            " (SELECT array_agg(l.locktype || ':' || l.mode || ':' || coalesce(l.relation::regclass"
            "::text, l.transactionid::text, l.objid::text, '') || ':' || l.granted)"
            " FROM pg_locks l WHERE l.pid = a.pid AND (NOT l.granted OR l.locktype NOT IN"
            " ('relation', 'virtualxid'))) AS locks"
            " FROM pg_stat_activity a WHERE a.datname = current_database()"
            " AND a.pid <> pg_backend_pid()"
        )
        with self._side.connect() as conn:
            return [dict(row) for row in conn.execute(query).mappings()]

    def _collect(self, got: dict[int, Outcome], timeout: float) -> None:
        try:
            index, outcome = self._results.get(timeout=timeout)
        except queue.Empty:
            return
        got[index] = outcome

    @contextlib.contextmanager
    def _held(self, row_id: int | str | None, table: str) -> Iterator[Callable[[], int] | None]:
        if row_id is None or self._side is None:
            yield None
            return
        with self._side.connect() as conn, conn.begin():
            conn.execute(
                sa.text(f"SELECT 1 FROM {table} WHERE id = :id FOR UPDATE"), {"id": row_id}
            )
            me = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()

            def waiting() -> int:
                """Sessions of this database queued on a lock (behind ours, or behind those).

                PostgreSQL reads the list of sessions once per transaction and shows that
                list ever after: without the clear, a session that connected since the
                first count (an actor's new connection) is never counted, and the round
                holds the row for all of ``_HOLD_LIMIT_S``.
                """
                conn.execute(sa.text("SELECT pg_stat_clear_snapshot()"))
                return int(
                    conn.execute(
                        sa.text(
                            "SELECT count(*) FROM pg_stat_activity WHERE datname ="
                            " current_database() AND wait_event_type = 'Lock' AND pid <> :me"
                        ),
                        {"me": me},
                    ).scalar_one()
                )

            yield waiting

    def close(self) -> None:
        for inbox in self._inboxes:
            inbox.put(None)
        for thread in self._threads:
            thread.join(timeout=30)
        for kernel in self.kernels:
            kernel.close()
        if self._side is not None:
            self._side.dispose()


def job_spec(job_id: str, **fields: Any) -> dict[str, Any]:
    """A callable job every race can stage many occurrences of; ``fields`` override."""
    return {
        "id": job_id,
        "kind": "callable",
        "payload": {"callable": "jobs.sample:run"},
        "overlap": "allow",
        # Rounds stage many occurrences side by side; admission's backlog bound is not
        # what they test.
        "max_queued": 10000,
        "delivery": "at-least-once",
        "max_attempts": 3,
        "lease": f"{LEASE_S}s",
        "retry": {"backoff": "10s", "factor": 2, "max": "1h", "jitter": 0},
        **fields,
    }


#: The jobs every Stage defines: plain, at-most-once, one attempt only, exclusive, pooled.
JOB_SPECS = {
    "alo": job_spec("alo"),
    "amo": job_spec("amo", delivery="at-most-once"),
    "once": job_spec("once", max_attempts=1),
    "queue": job_spec("queue", overlap="queue"),
    "pool-a": job_spec("pool-a", pool="db"),
    "pool-b": job_spec("pool-b", pool="db"),
}


class Stage:
    """Puts occurrences where a round starts from, through the public API of ``kernel``."""

    def __init__(self, kernel: Kernel, clock: ManualClock) -> None:
        self.kernel = kernel
        self.clock = clock
        self._seq = 0
        for spec in JOB_SPECS.values():
            kernel.define_job(spec)

    def next_id(self, prefix: str) -> str:
        self._seq += 1
        return f"{prefix}-{self._seq}"

    def firing(self, job_id: str = "alo", n: int = 1) -> Op:
        """Beat's next firing of ``job_id`` (``n`` trigger keys), planned from the cursor now."""
        job = self.kernel.get_job(job_id)
        firings = [(self.next_id(f"{job_id}:t"), self.clock.now) for _ in range(n)]
        after = (self.next_id(f"{job_id}:c"), self.clock.now + timedelta(hours=1))
        return lambda k: k.fire(
            job_id,
            expected_revision=job.revision,
            expected_cursor=job.next_trigger_key if job.planned else None,
            firings=firings,
            next_cursor=after,
        )

    def fresh(self, job_id: str = "alo", n: int = 1) -> list[int]:
        """``n`` new queued occurrences of ``job_id``, materialised as Beat does."""
        report = self.firing(job_id, n)(self.kernel)
        assert not report.stale and len(report.created) == n, report
        return list(report.created)

    def running(self, job_id: str = "alo", owner: str = "w1") -> Claim:
        (occ_id,) = self.fresh(job_id)
        claim = self.kernel.claim(occ_id, owner=owner, lease=LEASE_S)
        assert claim is not None
        return claim

    def pause_pending(self, job_id: str = "alo") -> tuple[Claim, str]:
        """A running occurrence whose holder was asked to pause: (its claim, the request id)."""
        claim, rid = self.running(job_id), self.next_id("pause")
        self.kernel.request_pause(
            claim.occurrence.id,
            expected_fence=claim.fence,
            request_id=rid,
            safe_points=SAFE_POINTS,
            operator="stage",
        )
        return claim, rid

    def paused(self, job_id: str = "alo") -> Claim:
        claim, rid = self.pause_pending(job_id)
        self.kernel.ack_pause(
            claim.occurrence.id,
            owner=claim.owner,
            fence=claim.fence,
            request_id=rid,
            expected_revision=None,
            safe_point=SAFE_POINTS[0],
            checkpoint={"step": 1},
        )
        return claim

    def dead_letter(self, job_id: str = "alo") -> Claim:
        """Dead-lettered by a fatal failure, error code FATAL."""
        claim = self.running(job_id)
        self.kernel.fail(
            claim.occurrence.id,
            owner=claim.owner,
            fence=claim.fence,
            code="FATAL",
            message="stage",
            retryable=False,
        )
        return claim

    def awaiting_adjudication(self) -> Claim:
        """An at-most-once run whose lease expired: needs_adjudication, error LEASE_EXPIRED."""
        claim = self.running("amo")
        self.clock.advance(LEASE_S + 1)
        counts = self.kernel.expire_leases()
        assert counts["needs_adjudication"] == 1, counts
        return claim


# -- checks after a round -------------------------------------------------------------------


def occurrence_state(kernel: Kernel, occ_id: int) -> dict[str, Any]:
    """One occurrence's rows: the occurrence, its control, its unused grants and its events."""
    import json

    def rows(table: str, key: str, order: str) -> list[dict[str, Any]]:
        query = sa.text(f"SELECT * FROM {table} WHERE {key} = :id ORDER BY {order}")  # noqa: S608
        return [dict(r) for r in conn.execute(query, {"id": occ_id}).mappings()]

    with kernel.engine.connect() as conn:
        (occurrence,) = rows("occurrences", "id", "id")
        controls = rows("controls", "occurrence_id", "occurrence_id")
        grants = [g for g in rows("requeue_grants", "occurrence_id", "created_at")]
        events = [
            (e["type"], json.loads(e["data"]) | {"fence": e["fence"]})
            for e in rows("events", "occurrence_id", "id")
        ]
    return {
        "occurrence": occurrence,
        "control": controls[0] if controls else None,
        "grants": grants,
        "events": events,
    }


_STATUS_EVENTS = {
    "occurrence_created": "queued",
    "occurrence_claimed": "running",
    "occurrence_handed_back": "retry_wait",
    "occurrence_paused": "retry_wait",
    "occurrence_requeued": "retry_wait",
    "occurrence_approved": "queued",
    "occurrence_rejected": "skipped",
}


def status_named_by(type_: str, data: dict[str, Any]) -> str | None:
    """The occurrence status an event says its transition left, or None (not a status event)."""
    if type_ == "occurrence_created" and data.get("awaiting_approval"):
        return "awaiting_approval"
    if type_ in _STATUS_EVENTS:
        return _STATUS_EVENTS[type_]
    if type_ == "occurrence_adjudicated":
        return str(data["status"])
    status = type_.removeprefix("occurrence_")
    known = (*SETTLED, "retry_wait", "needs_adjudication")
    return status if status in known else None


def problems(state: dict[str, Any], now_ms: int) -> list[str]:
    """What is wrong with one occurrence: stuck where no actor moves it, or a log that lies.

    Stuck: waiting with a cancel request (no claim takes it), waiting with no attempt
    left and nothing that makes the next claim free, an expired lease that neither a
    claim nor lease expiry takes, a paused control on a row a resume cannot free, a
    settled occurrence with an open control, a lease on a row that is not running. The
    log: the last status event names the status, and claims carry fences 1, 2, ... up to
    the occurrence's fence.
    """
    o, c = state["occurrence"], state["control"]
    status, found = o["status"], []
    control = c["state"] if c is not None else None
    unused_grant = any(
        g["claimed_at"] is None and g["expected_fence"] == o["fence"] for g in state["grants"]
    )
    if status in ("queued", "retry_wait"):
        if o["cancel_requested"]:
            found.append(f"{status} with cancel_requested: no claim takes it")
        resumes = control == "resumed" and c["expected_fence"] == o["fence"]
        free = resumes or unused_grant or control == "paused"  # paused: a resume frees it
        if not free and o["attempt"] >= o["max_attempts"]:
            found.append(f"{status} with attempt {o['attempt']}/{o['max_attempts']}, no grant")
    elif status == "running":
        if o["lease_owner"] is None or o["lease_expires_at"] is None:
            found.append("running without a lease")
        elif o["lease_expires_at"] <= now_ms:
            expiry_takes = (
                o["cancel_requested"]
                or o["delivery"] == "at-most-once"
                or o["lost_leases"] >= o["max_lost_leases"]
            )
            if not expiry_takes and control == "paused":
                pass  # an operator resume makes it claimable
            elif not expiry_takes and o["delivery"] != "at-least-once":
                found.append("running, lease expired, taken by neither claim nor expiry")
    if status != "running" and (o["lease_owner"] is not None or o["lease_expires_at"]):
        found.append(f"{status} with a live lease ({o['lease_owner']}, {o['lease_expires_at']})")
    if control == "paused" and status not in SETTLED and status != "retry_wait":
        found.append(f"{status} with a paused control: a resume would free nothing")
    if status in SETTLED and control not in (None, "terminal"):
        found.append(f"{status} with an open {control} control")
    named = [s for s in (status_named_by(t, d) for t, d in state["events"]) if s is not None]
    if not named or named[-1] != status:
        found.append(f"status {status}, but the last status event says {named[-1:]}")
    claims = [d["fence"] for t, d in state["events"] if t == "occurrence_claimed"]
    if claims != list(range(1, o["fence"] + 1)):
        found.append(f"fence {o['fence']}, claims logged at fences {claims}")
    return found


def counter_problems(kernel: Kernel) -> list[str]:
    """Counters that disagree with the rows they count: a pool's ``running`` and its
    running occurrences (at most its limit), a budget window's runs and units and its
    unreleased reservations (at most a shared budget's limits)."""
    found = []
    with kernel.engine.connect() as conn:
        pools = conn.execute(
            sa.text(
                'SELECT p.name, p.running, p."limit", (SELECT count(*) FROM occurrences o'
                " WHERE o.pool = p.name AND o.status = 'running') AS counted FROM pools p"
            )
        ).all()
        windows = conn.execute(
            sa.text(
                "SELECT w.budget, w.window_start, w.runs, w.units, b.max_runs, b.max_units,"
                " (SELECT count(*) FROM budget_reservations r WHERE r.budget = w.budget AND"
                "  r.window_start = w.window_start AND r.released_at IS NULL) AS held,"
                " (SELECT coalesce(sum(r.units), 0) FROM budget_reservations r WHERE"
                "  r.budget = w.budget AND r.window_start = w.window_start AND"
                "  r.released_at IS NULL) AS held_units"
                " FROM budget_windows w LEFT JOIN budgets b ON b.name = w.budget"
            )
        ).all()
    for name, running, limit, counted in pools:
        if not running == counted <= limit:
            found.append(f"pool {name}: running {running}, counted {counted}, limit {limit}")
    for w in windows:
        where = f"budget {w.budget} window {w.window_start}"
        if (w.runs, w.units) != (w.held, w.held_units):
            found.append(f"{where}: runs/units {w.runs}/{w.units}, held {w.held}/{w.held_units}")
        if w.max_runs is not None and w.runs > w.max_runs:
            found.append(f"{where}: {w.runs} runs past max_runs {w.max_runs}")
        if w.max_units is not None and w.units > w.max_units:
            found.append(f"{where}: {w.units} units past max_units {w.max_units}")
    return found
