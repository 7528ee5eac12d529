"""KernelScheduler: Beat materialises due firings through the kernel and pumps hints.

Any number of Beats may run: the kernel's cursor compare-and-set and unique
firing keys make a second Beat's work a no-op, with no leader lock.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from datetime import datetime
from typing import Any

from celery.beat import Scheduler

from beat_schedule import timing
from beat_schedule.jobfiles import validate_job_file
from beat_schedule.sync import apply_specs, beat_schedule_specs
from celery_app.config import KernelSettings, ensure_broker_folders, open_kernel
from kernel import Job, Kernel, KernelError
from kernel.redaction import masked_url

__all__ = ["KernelScheduler", "RUN_OCCURRENCE", "plan_job"]

log = logging.getLogger("celery_kernel.beat")

RUN_OCCURRENCE = "kernel.run_occurrence"


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


class KernelScheduler(Scheduler):  # type: ignore[misc]
    """Celery Beat scheduler backed by the kernel (``beat_scheduler`` or ``-S kernel``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.kernel: Kernel | None = None
        self._ticking = False
        self.beat_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        super().__init__(*args, **kwargs)
        self.settings = KernelSettings.from_app(self.app)
        self.max_interval = self.settings.beat_interval

    # -- Celery Scheduler hooks ---------------------------------------------------

    def setup_schedule(self) -> None:
        """Open the kernel and apply ``beat_schedule`` and ``KERNEL_JOBS_FILE`` definitions."""
        ensure_broker_folders(self.app)  # the pump publishes from this process
        self.kernel = open_kernel(self.app)
        apply_specs(self.kernel, beat_schedule_specs(self.app.conf), source="beat_schedule")
        jobs_file = os.environ.get("KERNEL_JOBS_FILE") or self.app.conf.get("kernel_jobs_file")
        if jobs_file:
            try:
                applied = self.kernel.apply_jobs(
                    [spec.to_dict() for spec in validate_job_file(jobs_file)]
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
        self.data: dict[str, Any] = {}

    @property
    def schedule(self) -> dict[str, Any]:
        return self.data

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """One pass: heartbeat, lease expiry, due firings, dispatch pump. Never raises."""
        kernel = self.kernel
        assert kernel is not None, "setup_schedule opens the kernel"
        self._ticking = True
        try:
            for step in (self._heartbeat, self._expire, self._materialise, self._pump):
                try:
                    step(kernel)
                except Exception:  # Beat must outlive one bad job or one storage hiccup
                    log.exception(
                        "beat step %s failed; the tick goes on",
                        step.__name__,
                        extra={"action": "tick_step_failed", "beat_id": self.beat_id},
                    )
        finally:
            self._ticking = False
        return float(self.max_interval)

    def close(self) -> None:
        """Close the kernel, unless a tick is under way in this very thread.

        Celery Beat's SIGTERM handler calls ``close()`` from inside the signal handler,
        which can interrupt a tick in the middle of a kernel transaction: closing the
        kernel there would wait forever for the connection that tick holds. The handler
        then raises SystemExit, and Beat calls ``close()`` again once the tick unwound.
        """
        if self._ticking:
            return
        if self.kernel is not None:
            self.kernel.close()
            self.kernel = None
        super().close()

    @property
    def info(self) -> str:
        url = masked_url(self.settings.database_url) if hasattr(self, "settings") else "?"
        return f"    . kernel -> {url} (beat id {self.beat_id})"

    # -- tick steps -----------------------------------------------------------------

    def _heartbeat(self, kernel: Kernel) -> None:
        kernel.record_beat(
            self.beat_id, host=socket.gethostname(), interval=float(self.max_interval)
        )

    def _expire(self, kernel: Kernel) -> None:
        kernel.expire_leases()

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
        with self.app.producer_or_acquire() as producer:
            for hint in hints:
                self.app.send_task(
                    RUN_OCCURRENCE,
                    args=[hint.occurrence_id],
                    queue=hint.queue,
                    shadow=hint.job_id,
                    producer=producer,
                )
        log.debug(
            "published %d hints", len(hints), extra={"action": "pumped", "beat_id": self.beat_id}
        )
