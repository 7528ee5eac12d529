"""The Kernel facade: one method per operation, each one transaction with its events."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import sqlalchemy as sa

from kernel import (
    adapter_verdicts,
    admission,
    approvals,
    beats,
    budgets,
    cancellation,
    claiming,
    dispatch,
    history,
    output,
    pausing,
    reads,
    retention,
    runs,
    sources,
    watchdog,
)
from kernel import jobs as job_ops
from kernel import operator as op
from kernel import pools as pool_ops
from kernel.cancellation import JobCancel
from kernel.clock import Clock, default_clock
from kernel.engine import check_schema, create_kernel_engine, migrate
from kernel.errors import InvalidArgument
from kernel.records import from_dt, to_dt
from kernel.session import Session
from kernel.translate import guard
from kernel.tx import Tx
from kernel.types import (
    ActionResult,
    AdapterAsk,
    Adjudication,
    Beat,
    Claim,
    DispatchHint,
    Event,
    Job,
    Occurrence,
    Pool,
    RenewAnswer,
    Verdict,
)

__all__ = ["Kernel", "FireReport"]

FireReport = job_ops.FireReport
R = TypeVar("R")


def _ms(seconds: float, field: str) -> int:
    if seconds <= 0:
        raise InvalidArgument(field, "must be positive")
    return int(seconds * 1000)


def _lease_ms(lease: float | None) -> int | None:
    return None if lease is None else _ms(lease, "lease")


def _checked_budgets(defined: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: budgets.read_budget(b, f"budgets.{name}") for name, b in defined.items()}


class Kernel:
    """The durable authority for occurrences, fences, leases, controls and retries.

    Args:
        engine: from :func:`kernel.engine.create_kernel_engine`.
        clock: where "now" comes from; default: the database server's clock on
            PostgreSQL, this host's on SQLite.
        check: refuse a database whose schema this code does not know.
    """

    def __init__(
        self, engine: sa.Engine, *, clock: Clock | None = None, check: bool = True
    ) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self.clock = clock or default_clock(self.dialect)
        self._session = Session(engine, self.clock)
        if check:
            guard(check_schema, engine)

    @classmethod
    def open(
        cls,
        url: str,
        *,
        migrate_schema: bool = False,
        clock: Clock | None = None,
        **engine_kwargs: Any,
    ) -> Kernel:
        """Open the kernel at ``url``; ``migrate_schema`` upgrades the schema first."""
        engine = create_kernel_engine(url, **engine_kwargs)
        try:
            if migrate_schema:
                guard(migrate, engine)
            return cls(engine, clock=clock)
        except BaseException:
            engine.dispose()  # nobody else can: the caller never gets the kernel
            raise

    def migrate(self) -> tuple[str | None, str]:
        return guard(migrate, self.engine)

    def close(self) -> None:
        self._session.close()
        self.engine.dispose()

    # -- transactions --------------------------------------------------------

    def _write(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        return self._session.run(fn, *args, **kwargs)

    def _read(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        return self._session.run(fn, *args, read_only=True, **kwargs)

    def now(self) -> datetime:
        """The kernel's current time (the database clock on PostgreSQL)."""
        return to_dt(self._session.now_ms())  # type: ignore[return-value]

    # -- job definitions -----------------------------------------------------

    def define_job(
        self, spec: Mapping[str, Any], *, operator: str | None = None
    ) -> tuple[Job, bool]:
        """Create a job. Returns (job, created); identical content again is a no-op.

        ``operator`` (here and in the other definition changes) is recorded in the
        event as who made the change, when given.

        Raises:
            InvalidArgument: a field is invalid (``field`` names it).
            StateConflict: the id exists with other content.
        """
        return self._write(job_ops.define_job, spec, operator)

    def revise_job(
        self, spec: Mapping[str, Any], *, expected_revision: int, operator: str | None = None
    ) -> tuple[Job, bool]:
        """Replace a definition by CAS on its revision. Raises RevisionConflict when stale."""
        return self._write(job_ops.revise_job, spec, expected_revision, operator)

    def apply_job(self, spec: Mapping[str, Any], *, operator: str | None = None) -> tuple[Job, str]:
        """Upsert: ``created``, ``updated`` (revision + 1) or ``unchanged``."""
        return self._write(job_ops.apply_job, spec, operator)

    def apply_jobs(
        self,
        specs: Sequence[Mapping[str, Any]],
        *,
        operator: str | None = None,
        shared_budgets: Mapping[str, Mapping[str, Any]] | None = None,
        pools: Mapping[str, int] | None = None,
    ) -> list[tuple[Job, str]]:
        """Apply every spec in one transaction; any refusal leaves the kernel unchanged.

        A job file's ``pools:`` limits and ``shared_budgets`` (its ``budgets:``) are set
        first, so its jobs may name them.
        """

        def run(tx: Tx) -> list[tuple[Job, str]]:
            for name, limit in sorted((pools or {}).items()):
                pool_ops.set_limit(tx, name, limit)
            if shared_budgets:
                budgets.set_budgets(tx, _checked_budgets(shared_budgets))
            return job_ops.apply_jobs(tx, list(specs), operator)

        return self._write(run)

    def set_job_enabled(
        self, job_id: str, enabled: bool, *, operator: str | None = None
    ) -> tuple[Job, bool]:
        return self._write(job_ops.set_enabled, job_id, enabled, operator)

    def delete_job(self, job_id: str, *, operator: str | None = None) -> None:
        """Raises StateConflict while the job has unsettled occurrences."""
        self._write(job_ops.delete_job, job_id, operator)

    def get_job(self, job_id: str) -> Job:
        return self._read(job_ops.get_job, job_id)

    def list_jobs(self) -> list[Job]:
        return self._read(reads.list_jobs)

    # -- Beat ------------------------------------------------------------------

    def due_jobs(self, limit: int = 500) -> list[Job]:
        """Jobs whose cursor is due now, and jobs not planned yet."""
        return self._read(job_ops.due_jobs, limit)

    def fire(
        self,
        job_id: str,
        *,
        expected_revision: int,
        expected_cursor: str | None,
        firings: Sequence[tuple[str, datetime]] = (),
        missed: Sequence[tuple[str, datetime]] = (),
        missed_reason: str | None = None,
        next_cursor: tuple[str, datetime] | None,
    ) -> job_ops.FireReport:
        """Advance a job's fire cursor by CAS and materialise the firings it passed.

        ``firings`` and ``missed`` are (trigger key, instant) pairs; missed ones are
        recorded as skipped with ``missed_reason``. A stale caller changes nothing.
        """
        return self._write(
            job_ops.fire,
            job_id,
            expected_revision=expected_revision,
            expected_cursor=expected_cursor,
            firings=[(k, from_dt(at)) for k, at in firings],
            missed=[(k, from_dt(at)) for k, at in missed],
            missed_reason=missed_reason,
            next_cursor=(next_cursor[0], from_dt(next_cursor[1])) if next_cursor else None,
        )

    def run_now(
        self, job_id: str, *, request_id: str, operator: str, force: bool = False
    ) -> ActionResult:
        """Run a job now (also a disabled one); a retried request id never runs twice.

        Admitted like a firing (overlap policy, ``max_queued``) unless ``force``.

        Raises:
            StateConflict: not admitted (``reason``: ``overlap`` or ``queue_full``).
            RevisionConflict: a replay of ``request_id`` after the job was revised.
        """
        occ_id, dedup = self._write(admission.run_now, job_id, request_id, operator, force=force)
        return ActionResult(self.get_occurrence(occ_id), request_id, dedup)

    def dispatch_batch(self, *, limit: int = 200, rehint_after: float = 30.0) -> list[DispatchHint]:
        """Occurrences to publish a hint for; marks them hinted (SPEC §2.3)."""
        return self._write(
            dispatch.dispatch_batch, limit=limit, rehint_after_ms=int(rehint_after * 1000)
        )

    def expire_leases(self, limit: int = 200) -> dict[str, int]:
        return self._write(runs.expire_leases, limit)

    def record_beat(self, beat_id: str, *, host: str, interval: float) -> None:
        self._write(beats.record_beat, beat_id, host, interval)

    def beats(self) -> list[Beat]:
        return self._read(beats.list_beats)

    # -- workers ----------------------------------------------------------------

    def claim(self, occurrence_id: int, *, owner: str, lease: float | None = None) -> Claim | None:
        """Claim one occurrence by id if claimable now (fence + 1); None changes nothing.

        ``lease`` defaults to the job's own lease from the occurrence's snapshot.
        """
        return self._write(claiming.claim, occurrence_id, owner, _lease_ms(lease))

    def claim_next(
        self,
        *,
        owner: str,
        lease: float | None = None,
        queues: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
    ) -> Claim | None:
        """Claim the oldest claimable occurrence (optionally of these queues/kinds)."""
        return self._write(
            claiming.claim_next,
            owner,
            _lease_ms(lease),
            queues=tuple(queues) if queues else None,
            kinds=tuple(kinds) if kinds else None,
        )

    def renew(self, occurrence_id: int, *, owner: str, fence: int, lease: float) -> RenewAnswer:
        """Extend the lease. Raises LeaseLost when (owner, fence) no longer holds it."""
        return self._write(runs.renew, occurrence_id, owner, fence, _ms(lease, "lease"))

    def succeed(self, occurrence_id: int, *, owner: str, fence: int, result: Any = None) -> None:
        """Settle as succeeded (fenced); chained children fire in the same transaction."""
        self._write(runs.settle, occurrence_id, owner, fence, outcome="succeeded", result=result)

    def fail(
        self,
        occurrence_id: int,
        *,
        owner: str,
        fence: int,
        code: str,
        message: str,
        retryable: bool = True,
    ) -> str:
        """Settle a failure (fenced): retry_wait with backoff, or dead_letter; returns which."""
        error = {"code": code, "message": message[:2000]}
        return self._write(
            runs.settle,
            occurrence_id,
            owner,
            fence,
            outcome="failed",
            error=error,
            retryable=retryable,
        ).value

    def cancelled(self, occurrence_id: int, *, owner: str, fence: int) -> None:
        """The holder stopped on a cancel request (fenced)."""
        self._write(
            runs.settle,
            occurrence_id,
            owner,
            fence,
            outcome="cancelled",
            error={"code": "CANCELLED", "message": "cancelled while running"},
        )

    def ack_pause(
        self,
        occurrence_id: int,
        *,
        owner: str,
        fence: int,
        request_id: str,
        expected_revision: int | None,
        safe_point: str,
        checkpoint: Any,
    ) -> None:
        """Acknowledge a pause at a declared safe point, storing the checkpoint (≤ 64 KiB)."""
        self._write(
            runs.release,
            occurrence_id,
            owner,
            fence,
            safe_point=safe_point,
            checkpoint=checkpoint,
            pause_request_id=request_id,
            expected_revision=expected_revision,
        )

    def hand_back(
        self, occurrence_id: int, *, owner: str, fence: int, safe_point: str, checkpoint: Any
    ) -> None:
        """Give the occurrence back for another worker to resume at once (warm shutdown)."""
        self._write(
            runs.release,
            occurrence_id,
            owner,
            fence,
            safe_point=safe_point,
            checkpoint=checkpoint,
            pause_request_id=None,
            expected_revision=None,
        )

    # -- operators ---------------------------------------------------------------

    def _action(
        self, fn: Callable[..., bool], occurrence_id: int, request_id: str, **kwargs: Any
    ) -> ActionResult:
        dedup = self._write(fn, occurrence_id, request_id=request_id, **kwargs)
        return ActionResult(self.get_occurrence(occurrence_id), request_id, dedup)

    def request_pause(
        self,
        occurrence_id: int,
        *,
        expected_fence: int | None = None,
        request_id: str,
        safe_points: Sequence[str],
        operator: str,
        expected_revision: int | None = None,
        checkpoint_schema_version: int = 1,
    ) -> ActionResult:
        """Ask the holder to pause at its next safe point (PAUSE_UNSUPPORTED without any).

        ``expected_fence`` / ``expected_revision``: pause only that run / control
        revision (None: whatever runs now). ``safe_points`` and
        ``checkpoint_schema_version`` are the adapter's declared capability; its
        digest is part of the request's replay evidence.
        """
        return self._action(
            pausing.request_pause,
            occurrence_id,
            request_id,
            expected_fence=expected_fence,
            expected_revision=expected_revision,
            safe_points=tuple(safe_points),
            schema_version=checkpoint_schema_version,
            operator=operator,
        )

    def resume(
        self,
        occurrence_id: int,
        *,
        request_id: str,
        operator: str,
        expected_revision: int | None = None,
    ) -> ActionResult:
        return self._action(
            pausing.resume,
            occurrence_id,
            request_id,
            expected_revision=expected_revision,
            operator=operator,
        )

    def requeue(
        self,
        occurrence_id: int,
        *,
        expected_fence: int | None = None,
        expected_error_code: str | None = None,
        request_id: str,
        operator: str,
    ) -> ActionResult:
        """Revive a dead letter; the evidence given (fence, error code) must still hold."""
        return self._action(
            op.requeue,
            occurrence_id,
            request_id,
            expected_fence=expected_fence,
            expected_error_code=expected_error_code,
            operator=operator,
        )

    def adjudicate(
        self, occurrence_id: int, *, decision: str, request_id: str, operator: str
    ) -> ActionResult:
        return self._action(
            op.adjudicate, occurrence_id, request_id, decision=decision, operator=operator
        )

    def cancel(self, occurrence_id: int, *, request_id: str, operator: str) -> ActionResult:
        return self._action(op.cancel, occurrence_id, request_id, operator=operator)

    # -- reads -------------------------------------------------------------------

    def get_occurrence(self, occurrence_id: int) -> Occurrence:
        return self._read(reads.get_occurrence, occurrence_id)

    def list_occurrences(
        self,
        *,
        job_id: str | None = None,
        statuses: Sequence[str] | None = None,
        limit: int = 50,
        before_id: int | None = None,
    ) -> list[Occurrence]:
        return self._read(
            reads.list_occurrences,
            job_id=job_id,
            statuses=tuple(statuses) if statuses else None,
            limit=limit,
            before_id=before_id,
        )

    def active_occurrences(self, job_id: str) -> list[Occurrence]:
        return self.list_occurrences(
            job_id=job_id, statuses=("queued", "running", "retry_wait"), limit=reads.MAX_LIST
        )

    def events(
        self,
        *,
        after_id: int = 0,
        job_id: str | None = None,
        occurrence_id: int | None = None,
        limit: int = 100,
        before_id: int | None = None,
    ) -> list[Event]:
        """Events after ``after_id``, oldest first; with ``before_id`` the newest below it."""
        return self._read(
            reads.read_events,
            after_id=after_id,
            job_id=job_id,
            occurrence_id=occurrence_id,
            limit=limit,
            before_id=before_id,
        )

    def last_event_id(self) -> int:
        """The newest event's id (0 for none): where ``events --follow`` starts."""
        return self._read(reads.last_event_id)

    def runtime_controls(
        self,
        limit: int = 200,
        *,
        statuses: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Running, pause-requested and paused occurrences, most recently changed first
        (at most 200), optionally only these ``statuses`` (``reads.RUNTIME_STATES``) and
        job ``kinds``; without payloads or lease owners."""
        return self._read(reads.runtime_controls, limit, statuses, kinds)

    def status(self) -> dict[str, Any]:
        return self._read(reads.status_counts)

    def prune(self, *, older_than: timedelta, limit: int = 10_000) -> dict[str, int]:
        """Delete settled history older than ``older_than``; unresolved work is never pruned."""

        def run(tx: Tx) -> dict[str, int]:
            return history.prune(
                tx, settled_before=tx.now - int(older_than.total_seconds() * 1000), limit=limit
            )

        return self._write(run)

    # -- the Beat registry (kernel/beats.py) ----------------------------------------

    def deregister_beat(self, beat_id: str) -> bool:
        """Remove a Beat that stops cleanly (event ``beat_stopped``); False if unknown."""
        return self._write(beats.deregister_beat, beat_id)

    def forget_silent_beats(self, *, silent_for: float) -> list[str]:
        """Remove Beats silent for more than ``silent_for`` seconds (event ``beat_forgotten``).

        Returns:
            The ids of the Beats removed.
        """
        return self._write(beats.forget_silent_beats, _ms(silent_for, "silent_for"))

    def sync_job_source(self, source: str, owned: Mapping[str, str]) -> sources.SourceSync:
        """Record that ``source`` defines exactly ``owned`` (job id -> entry name): jobs it
        no longer lists are disabled (``job_retired``), retired ones listed again enabled."""
        return self._write(sources.sync_source, source, owned)

    def append_output(
        self, occurrence_id: int, *, owner: str, fence: int, chunks: Sequence[tuple[str, str]]
    ) -> None:
        """Store ``(stream, text)`` chunks of a run's output (fenced; see :mod:`kernel.output`)."""
        self._write(output.append_output, occurrence_id, owner, fence, chunks)

    # -- gates: approvals and budgets (kernel/approvals.py, kernel/budgets.py) -------

    def approve(
        self, occurrence_id: int, *, request_id: str, operator: str, reason: str | None = None
    ) -> ActionResult:
        """Queue an occurrence awaiting approval (idempotent by request id).

        Raises:
            StateConflict: it is not awaiting approval.
        """
        return self._action(
            approvals.decide,
            occurrence_id,
            request_id,
            approved=True,
            operator=operator,
            reason=reason,
        )

    def reject(
        self, occurrence_id: int, *, request_id: str, operator: str, reason: str | None = None
    ) -> ActionResult:
        """Skip an occurrence awaiting approval (reason ``approval_rejected``).

        Raises:
            StateConflict: it is not awaiting approval.
        """
        return self._action(
            approvals.decide,
            occurrence_id,
            request_id,
            approved=False,
            operator=operator,
            reason=reason,
        )

    def apply_approval_timeouts(self, limit: int = 200) -> dict[str, int]:
        """Beat: apply ``approval.auto`` to occurrences whose approval timed out.

        Returns:
            ``{"approved": n, "rejected": m}``.
        """
        return self._write(approvals.apply_timeouts, limit)

    def set_budgets(self, defined: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """Create or update shared budgets: name -> ``{"window", "max_runs", "max_units"}``.

        Raises:
            InvalidArgument: a budget is invalid (``field`` names it); nothing is written.
        """

        return self._write(budgets.set_budgets, _checked_budgets(defined))

    def list_budgets(self) -> list[dict[str, Any]]:
        """Every budget with the runs and units counted in its latest window."""
        return self._read(budgets.list_budgets)

    # -- job cancel, retention (kernel/cancellation.py, kernel/retention.py) ---------

    def cancel_job(
        self, job_id: str, *, cascade: bool = False, request_id: str, operator: str
    ) -> JobCancel:
        """Disable a job, cancel its waiting occurrences and ask its running ones to stop;
        ``cascade``: the same for every job chained after it. Idempotent by request id.

        Raises:
            NotFound: no such job.
            EvidenceConflict: the request id was used for something else.
        """
        return self._write(
            cancellation.cancel_job,
            job_id,
            cascade=cascade,
            request_id=request_id,
            operator=operator,
        )

    def apply_retention(
        self, ages: Mapping[str, float | None], *, limit: int = 500
    ) -> dict[str, Any]:
        """One bounded retention pass (see :mod:`kernel.retention`).

        Args:
            ages: seconds to keep each prunable status's history (``succeeded``,
                ``cancelled``, ``skipped``); None keeps it.
            limit: at most this many occurrences and this many jobs deleted.

        Returns:
            ``occurrences``, ``events`` (pruned), ``jobs`` (ids deleted) and ``more``.
        """
        if limit < 1:
            raise InvalidArgument("limit", "must be at least 1")
        return self._write(retention.apply_retention, dict(ages), limit)

    # -- the watchdog (kernel/watchdog.py) -----------------------------------------------

    def watchdog(self, *, grace: float = 60.0) -> dict[str, Any]:
        """Overdue firings, runs past their timeout (+ ``grace`` seconds) and the
        adjudication backlog; reads only."""
        return self._read(watchdog.findings, _ms(grace, "grace"))

    def record_watchdog(self, *, grace: float = 60.0) -> dict[str, Any]:
        """:meth:`watchdog`, appending ``watchdog_overdue`` / ``watchdog_overrun`` once per
        finding (Beat calls it periodically); ``new_events`` counts those appended."""
        return self._write(watchdog.record_findings, _ms(grace, "grace"))

    # -- resource pools (kernel/pools.py) ---------------------------------------------

    def set_pool_limit(self, name: str, limit: int) -> tuple[Pool, bool]:
        """Define pool ``name`` or change its limit (event ``pool_limit_set``); ``changed``
        is false when it already had ``limit``."""
        return self._write(pool_ops.set_limit, name, limit)

    def pools(self) -> list[Pool]:
        """Every pool with its limit, running and waiting counts, by name."""
        return self._read(pool_ops.list_pools)

    # -- adapter adjudication (kernel/adapter_verdicts.py; s3-adjudge) -----------------

    def adapter_asks_due(
        self, *, limit: int = 200, rehint_after: float = 30.0
    ) -> list[DispatchHint]:
        """Occurrences needing adjudication whose adapter a worker should ask now (Beat
        hints them); each is marked hinted."""
        return self._write(
            adapter_verdicts.adapter_asks_due,
            limit=limit,
            rehint_after_ms=_ms(rehint_after, "rehint_after"),
        )

    def ask_adapter(self, occurrence_id: int, *, asker: str, window: float) -> AdapterAsk | None:
        """Take the one live ask of the occurrence's uncertain run for ``window`` seconds
        (event ``occurrence_adapter_asked``); None when it is not to be asked now."""
        return self._write(
            adapter_verdicts.ask_adapter,
            occurrence_id,
            asker=asker,
            window_ms=_ms(window, "window"),
        )

    def adapter_adjudicates(
        self, occurrence_id: int, *, token: str, verdict: Verdict
    ) -> Occurrence:
        """Apply the adapter's verdict of ask ``token`` (``occurrence_adjudicated``,
        ``authority: adapter``).

        Raises:
            StateConflict: an operator decided first; the answer changes nothing.
            LeaseLost: the ask expired or another worker asks now.
            InvalidArgument: not applied/not_applied, or evidence too large.
        """
        return self._write(
            adapter_verdicts.adapter_adjudicates, occurrence_id, token=token, verdict=verdict
        )

    def adapter_cannot_tell(self, occurrence_id: int, *, token: str, reason: str) -> None:
        """The adapter of ask ``token`` could not tell (``occurrence_adapter_cannot_tell``):
        nobody asks again for this run; the operator decides. Raises as
        :meth:`adapter_adjudicates`."""
        self._write(adapter_verdicts.adapter_cannot_tell, occurrence_id, token=token, reason=reason)

    def last_adjudication(self, occurrence_id: int) -> Adjudication | None:
        """The last verdict (operator's or adapter's) on an uncertain run of the occurrence."""
        return self._read(adapter_verdicts.last_adjudication, occurrence_id)
