"""KernelScheduler: Beat materialises due firings through the kernel and pumps hints.

Any number of Beats may run: the kernel's cursor compare-and-set and unique
firing keys make a second Beat's work a no-op, with no leader lock.

Failures are sentences: a setting Beat cannot use ends it at start with exit 2, an
unreachable kernel at start with exit 1; an outage while running logs one warning
and, when it ends, one info with its length. SIGTERM and Ctrl-C (exit 130) let the
tick under way finish — its new occurrences get their hints — then Beat
deregisters and exits.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
import uuid
from datetime import datetime
from types import FrameType
from typing import Any

from celery.beat import Scheduler
from kombu.exceptions import OperationalError

from adapters import load_adapters
from beat_schedule import timing
from beat_schedule.jobfiles import read_job_file
from beat_schedule.kinds import check_kinds, worker_only_kinds
from beat_schedule.sync import read_beat_schedule, sync_beat_schedule
from celery_app.adjudication import hint_adapter_asks
from celery_app.config import KernelSettings, ensure_broker_folders, open_kernel, refuse_start
from kernel import Job, Kernel, KernelError, StorageUnavailable
from kernel.redaction import masked_url

__all__ = ["KernelScheduler", "RUN_OCCURRENCE", "plan_job"]

log = logging.getLogger("celery_kernel.beat")

RUN_OCCURRENCE = "kernel.run_occurrence"
#: Exit code after Ctrl-C (128 + SIGINT, as shells report it).
INTERRUPTED_EXIT = 130
#: How often a Beat removes Beats silent for longer than ``kernel_beat_retention``.
_FORGET_EVERY_S = 60.0
#: Kinds whose job code runs in the worker's own process, where Celery's time limits
#: stop it; shell and http enforce their timeout themselves.
_TIME_LIMITED_KINDS = frozenset({"task", "callable"})
#: The hard time limit's margin over the soft one: time for the body to unwind and the
#: run to settle as TIMEOUT before Celery kills the process.
_HARD_LIMIT_MARGIN_S = 5.0


def hint_time_limits(kind: str, timeout: float | None) -> dict[str, float]:
    """``send_task`` time limits enforcing a job's ``timeout`` (none for other kinds)."""
    if timeout is None or kind not in _TIME_LIMITED_KINDS:
        return {}
    return {"soft_time_limit": timeout, "time_limit": timeout + _HARD_LIMIT_MARGIN_S}


def plan_job(kernel: Kernel, job: Job, now: datetime) -> timing.Plan:
    """Which firings of ``job`` are due at ``now``, by its catch-up policy."""
    spec = job.spec
    cursor = None
    if job.planned and job.next_trigger_key is not None and job.next_fire_at is not None:
        cursor = timing.Firing(job.next_fire_at, job.next_trigger_key)
    schedule = spec["schedule"]
    # `in` counts from the definition. Anything else starts when the job was last
    # (re)defined or enabled, so nothing from before it existed is owed; a revision
    # leaves in next_fire_at where its planning resumes (see Kernel.revise_job).
    if schedule and "in" in schedule:
        anchor = job.defined_at
    elif not job.planned and job.next_fire_at is not None:
        anchor = job.next_fire_at
    else:
        anchor = job.updated_at
    return timing.plan_due(
        schedule,
        spec["dst"],
        spec["catchup"]["policy"],
        spec["catchup"]["window"],
        cursor=cursor,
        now=now,
        anchor=anchor,
    )


class KernelScheduler(Scheduler):
    """Celery Beat scheduler backed by the kernel (``beat_scheduler`` or ``-S kernel``)."""

    def __init__(self, app: Any, *args: Any, **kwargs: Any) -> None:
        self.kernel: Kernel | None = None
        self._ticking = False
        self._stop_code: int | None = None
        self._unavailable_since: float | None = None
        self._next_forget = 0.0
        self._next_retention = 0.0
        self._next_watch = 0.0
        #: Job id -> ``send_task`` options from its beat_schedule entry's ``options``.
        self.hint_options: dict[str, dict[str, Any]] = {}
        self.beat_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        try:  # before anything else: Celery builds a scheduler for its banner first
            self.settings = KernelSettings.from_app(app)
            self.jobs_file = self.settings.require_jobs_file()
        except KernelError as exc:
            refuse_start("beat", exc)
        super().__init__(app, *args, **kwargs)
        self.max_interval = self.settings.beat_interval

    # -- Celery Scheduler hooks ---------------------------------------------------

    def setup_schedule(self) -> None:
        """Open the kernel and apply ``beat_schedule`` and ``KERNEL_JOBS_FILE`` definitions."""
        if _is_celery_beat_handler(signal.getsignal(signal.SIGTERM)):
            # Replaced here, not at beat_init: Celery's handler, run while this very
            # scheduler is being built, would build a second one to close it.
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, self._on_stop_signal)
        try:
            ensure_broker_folders(self.app)  # the pump publishes from this process
            self.kernel = open_kernel(self.app)
            # As the worker does: the modules in `imports`/`include`, so each entry's task,
            # with its time limits and retry settings, is registered here.
            self.app.loader.import_default_modules()
            beat_schedule = read_beat_schedule(self.app.conf, self.app.tasks)
            sync_beat_schedule(self.kernel, beat_schedule)
        except KernelError as exc:
            refuse_start("beat", exc)
        self.hint_options = beat_schedule.hints
        if self.jobs_file:
            self._apply_jobs_file(self.kernel, self.jobs_file)
        self.data: dict[str, Any] = {}

    def _apply_jobs_file(self, kernel: Kernel, jobs_file: str) -> None:
        try:
            job_file = read_job_file(jobs_file)
            specs = job_file.jobs
            check_kinds(
                [(spec.id, spec.kind) for spec in specs],
                load_adapters(self.app),
                worker_only_kinds(self.app.conf),
                file=jobs_file,
            )
            applied = kernel.apply_jobs(
                [spec.to_dict() for spec in specs],
                pools=job_file.pools,
                shared_budgets=job_file.budgets,
            )
        except KernelError as exc:  # refused whole; the jobs already defined keep running
            log.error("job file not applied: %s", exc, extra={"action": "jobs_file_refused"})
        else:
            log.info(
                "%s: %s",
                jobs_file,
                ", ".join(f"{job.id} {change}" for job, change in applied),
                extra={"action": "jobs_file_applied"},
            )

    @property
    def schedule(self) -> dict[str, Any]:
        return self.data

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """One pass: heartbeat, lease expiry, due firings, dispatch pump, retention, watchdog.
        Never raises.

        While the kernel is unavailable the rest of a tick is skipped (each step would
        only fail the same way); a stop requested meanwhile takes effect at its end.
        """
        kernel = self.kernel
        assert kernel is not None, "setup_schedule opens the kernel"
        self._ticking = True
        try:
            steps = (
                self._heartbeat,
                self._expire,
                self._time_out_approvals,
                self._materialise,
                self._pump,
                self._ask_adapters,
                self._retain,
                self._watch,
            )
            for step in steps:
                try:
                    step(kernel)
                except StorageUnavailable as exc:
                    self._unavailable(exc)
                    break
                except Exception:  # Beat must outlive one bad job
                    log.exception(
                        "beat step %s failed; the tick goes on",
                        step.__name__,
                        extra={"action": "tick_step_failed", "beat_id": self.beat_id},
                    )
            else:
                self._available()
        finally:
            self._ticking = False
        if self._stop_code is not None:
            raise SystemExit(self._stop_code)
        return float(self.max_interval)

    def _on_stop_signal(self, signum: int, frame: FrameType | None) -> None:
        """SIGTERM or SIGINT: stop now between ticks, else once the tick under way ends."""
        self._stop_code = INTERRUPTED_EXIT if signum == signal.SIGINT else 0
        if not self._ticking:
            raise SystemExit(self._stop_code)

    def _unavailable(self, exc: StorageUnavailable) -> None:
        log.debug("tick skipped: %s", exc, exc_info=True, extra={"action": "tick_skipped"})
        if self._unavailable_since is None:
            self._unavailable_since = time.monotonic()
            log.warning(
                "kernel unavailable, Beat retries every %ss: %s",
                f"{self.max_interval:g}",
                exc.message,
                extra={"action": "kernel_unavailable", "beat_id": self.beat_id},
            )

    def _available(self) -> None:
        if self._unavailable_since is not None:
            outage = time.monotonic() - self._unavailable_since
            self._unavailable_since = None
            log.info(
                "kernel available again after %.1fs",
                outage,
                extra={"action": "kernel_available", "beat_id": self.beat_id, "outage_s": outage},
            )

    def close(self) -> None:
        """Deregister and close the kernel, unless a tick is under way in this very thread.

        Celery Beat's own SIGTERM handler (replaced once ``celery beat`` runs this
        scheduler) calls ``close()`` from inside the signal handler, which can
        interrupt a tick in the middle of a kernel transaction: closing the kernel there
        would wait forever for the connection that tick holds. Beat calls ``close()``
        again once the tick unwound. After Ctrl-C this ends Beat with exit 130.
        """
        if self._ticking:
            return
        if self.kernel is not None:
            try:
                self.kernel.deregister_beat(self.beat_id)
            except KernelError as exc:
                log.warning("beat not deregistered: %s", exc, extra={"action": "deregister_failed"})
            self.kernel.close()
            self.kernel = None
        super().close()
        if self._stop_code == INTERRUPTED_EXIT:
            raise SystemExit(INTERRUPTED_EXIT)

    @property
    def info(self) -> str:
        return f"    . kernel -> {masked_url(self.settings.database_url)} (beat id {self.beat_id})"

    # -- tick steps -----------------------------------------------------------------

    def _heartbeat(self, kernel: Kernel) -> None:
        kernel.record_beat(
            self.beat_id, host=socket.gethostname(), interval=float(self.max_interval)
        )
        if time.monotonic() >= self._next_forget:
            forgotten = kernel.forget_silent_beats(silent_for=self.settings.beat_retention)
            self._next_forget = time.monotonic() + _FORGET_EVERY_S
            if forgotten:
                log.info(
                    "forgot Beats silent for more than %gs: %s",
                    self.settings.beat_retention,
                    ", ".join(forgotten),
                    extra={"action": "beats_forgotten", "beat_id": self.beat_id},
                )

    def _expire(self, kernel: Kernel) -> None:
        kernel.expire_leases()

    def _time_out_approvals(self, kernel: Kernel) -> None:
        decided = kernel.apply_approval_timeouts()
        if any(decided.values()):
            log.info(
                "approval timeouts applied: %d approved, %d rejected",
                decided["approved"],
                decided["rejected"],
                extra={"action": "approval_timeouts", "beat_id": self.beat_id, **decided},
            )

    def _watch(self, kernel: Kernel) -> None:
        """Every minute: record overdue firings and runs past their timeout as events."""
        if time.monotonic() < self._next_watch:
            return
        self._next_watch = time.monotonic() + _FORGET_EVERY_S
        found = kernel.record_watchdog(grace=self.settings.watchdog_grace)
        if found["new_events"]:
            log.warning(
                "watchdog: %d overdue firing(s), %d run(s) past their timeout, "
                "%d occurrence(s) awaiting adjudication",
                found["overdue_firings"],
                len(found["overrunning"]),
                found["needs_adjudication"],
                extra={"action": "watchdog_findings", "beat_id": self.beat_id},
            )

    def _retain(self, kernel: Kernel) -> None:
        """One bounded retention pass every retention interval; the next tick goes on
        at once while a pass hit its bound (so a backlog drains in steps, not one
        long transaction)."""
        if time.monotonic() < self._next_retention:
            return
        done = kernel.apply_retention(self.settings.retention, limit=self.settings.retention_batch)
        self._next_retention = (
            0.0 if done["more"] else time.monotonic() + self.settings.retention_interval
        )
        if done["occurrences"] or done["jobs"]:
            log.info(
                "retention pruned %d occurrence(s), %d event(s); deleted job(s): %s%s",
                done["occurrences"],
                done["events"],
                ", ".join(done["jobs"]) or "none",
                " (more to do)" if done["more"] else "",
                extra={
                    "action": "retention_applied",
                    "beat_id": self.beat_id,
                    "occurrences": done["occurrences"],
                    "events": done["events"],
                    "jobs": done["jobs"],
                    "more": done["more"],
                },
            )

    def _materialise(self, kernel: Kernel) -> None:
        now = kernel.now()
        for job in kernel.due_jobs():
            try:
                plan = plan_job(kernel, job, now)
                report = kernel.fire(
                    job.id,
                    expected_revision=job.revision,
                    expected_cursor=job.next_trigger_key if job.planned else None,
                    firings=[(f.trigger_key, f.at) for f in plan.fire],
                    missed=[(f.trigger_key, f.at) for f in plan.missed],
                    missed_reason=plan.missed_reason,
                    next_cursor=(plan.next_cursor.trigger_key, plan.next_cursor.at)
                    if plan.next_cursor
                    else None,
                )
            except StorageUnavailable:
                raise
            except KernelError as exc:
                log.error(
                    "job %s not materialised: %s",
                    job.id,
                    exc,
                    extra={"action": "materialise_failed", "job_id": job.id},
                )
                continue
            if report.created or report.skipped:
                log.info(
                    "job %s: %d created, %d skipped",
                    job.id,
                    len(report.created),
                    len(report.skipped),
                    extra={"action": "materialised", "job_id": job.id},
                )

    def _pump(self, kernel: Kernel) -> None:
        hints = kernel.dispatch_batch(
            limit=self.settings.dispatch_batch, rehint_after=self.settings.rehint_after
        )
        if not hints:
            return
        try:
            with self.app.producer_or_acquire() as producer:
                for hint in hints:
                    self.app.send_task(
                        RUN_OCCURRENCE,
                        args=[hint.occurrence_id],
                        queue=hint.queue,
                        shadow=hint.job_id,
                        producer=producer,
                        **self.hint_options.get(hint.job_id, {}),
                        **hint_time_limits(hint.kind, hint.timeout),
                    )
        except OperationalError as exc:  # the broker is down: an outage, not a bad job
            log.warning(
                "broker unavailable, %d hint(s) not all published (%s); they are sent again "
                "after %gs",
                len(hints),
                exc,
                self.settings.rehint_after,
                extra={"action": "pump_broker_unavailable", "beat_id": self.beat_id},
            )
            return
        log.debug(
            "published %d hints", len(hints), extra={"action": "pumped", "beat_id": self.beat_id}
        )

    def _ask_adapters(self, kernel: Kernel) -> None:
        """Hint workers to ask adapters about uncertain runs (celery_app/adjudication.py)."""
        hint_adapter_asks(
            self.app,
            kernel,
            limit=self.settings.dispatch_batch,
            rehint_after=self.settings.rehint_after,
        )


def _is_celery_beat_handler(handler: Any) -> bool:
    """Whether ``handler`` is the one ``celery beat`` installs (so this process is Beat)."""
    return "install_sync_handler" in getattr(handler, "__qualname__", "")
