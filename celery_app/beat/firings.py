"""Beat's firing steps: materialise due firings into occurrences, pump their hints.

``plan_job`` decides which firings are due (pure, by the job's catch-up policy); the
kernel's ``fire`` records them with a cursor compare-and-set, so a second Beat's plan
for the same firings is a no-op. The pump publishes the claimable occurrences the
kernel hands out as ``run_occurrence`` hints (:func:`celery_app.hints.publish_hints`): one id per
message, or up to ``kernel_batch_max`` ids of one queue per message when that queue's
backlog is deep; a lost hint (or a batch's ids a dead worker never started) is sent
again after ``kernel_rehint_after``.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from kombu.exceptions import OperationalError

from beat_schedule import timing
from celery_app.adjudication import hint_adapter_asks
from celery_app.hints import publish_hints
from celery_app.settings import KernelSettings
from kernel import FireReport, Job, Kernel, KernelError, RevisionConflict, StorageUnavailable

__all__ = ["FiringSteps", "fire_plan", "plan_job"]

log = logging.getLogger("celery_kernel.beat")


def fire_plan(kernel: Kernel, job: Job, plan: timing.Plan) -> FireReport:
    """Fire ``plan`` of ``job`` (:func:`plan_job`) by compare-and-set on the job's revision
    and cursor as read: a Beat that read an older one is refused, not doubled."""
    return kernel.fire(
        job.id,
        expected_revision=job.revision,
        expected_cursor=job.next_trigger_key if job.planned else None,
        firings=plan.fire,
        missed=plan.missed,
        missed_reason=plan.missed_reason,
        missed_count=plan.missed_count,
        next_cursor=plan.next_cursor,
    )


def plan_job(kernel: Kernel, job: Job, now: datetime) -> timing.Plan:
    """Which firings of ``job`` are due at ``now``, by its catch-up policy."""
    spec = job.spec
    cursor = None
    if job.planned and job.next_trigger_key is not None and job.next_fire_at is not None:
        cursor = timing.Firing(job.next_trigger_key, job.next_fire_at)
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
        job_id=job.id,
    )


class FiringSteps:
    """The tick's materialise, pump and adapter-ask steps (a part of KernelScheduler)."""

    app: Any
    settings: KernelSettings
    beat_id: str
    #: Job id -> ``send_task`` options from its beat_schedule entry's ``options``.
    hint_options: dict[str, dict[str, Any]]

    #: (job id, revision) pairs this Beat recorded as unplannable: one write per revision.
    unplannable: set[tuple[str, int]]

    def _materialise(self, kernel: Kernel) -> None:
        now = kernel.now()
        for job in kernel.due_jobs():
            try:
                plan = plan_job(kernel, job, now)
            except Exception as exc:  # noqa: BLE001 - one job's plan never stops the others
                log.error(
                    "job %s not materialised: its schedule cannot be planned: %s",
                    job.id,
                    exc,
                    exc_info=not isinstance(exc, KernelError),
                    extra={"action": "materialise_failed", "job_id": job.id},
                )
                self._record_unplannable(
                    kernel, job, f"its schedule cannot be planned: {type(exc).__name__}: {exc}"
                )
                continue
            try:
                report = fire_plan(kernel, job, plan)
            except StorageUnavailable:
                raise
            except KernelError as exc:
                log.error(
                    "job %s not materialised: %s",
                    job.id,
                    exc,
                    extra={"action": "materialise_failed", "job_id": job.id},
                )
                if not isinstance(exc, RevisionConflict):  # a race with an edit is no finding
                    self._record_unplannable(kernel, job, f"firing it was refused: {exc}")
                continue
            if report.created or report.skipped:
                log.info(
                    "job %s: %d created, %d skipped",
                    job.id,
                    len(report.created),
                    len(report.skipped),
                    extra={"action": "materialised", "job_id": job.id},
                )

    def _record_unplannable(self, kernel: Kernel, job: Job, error: str) -> None:
        """Make the failure the job's event and ``status``/``doctor`` finding, once per
        revision of it this Beat meets (the kernel also refuses a second record)."""
        if (job.id, job.revision) in self.unplannable:
            return
        try:
            kernel.record_unplannable(job.id, revision=job.revision, error=error)
        except StorageUnavailable:
            raise
        except KernelError as exc:  # the next tick tries again
            log.warning(
                "job %s: could not record that it cannot be planned: %s",
                job.id,
                exc,
                extra={"action": "unplannable_not_recorded", "job_id": job.id},
            )
            return
        self.unplannable.add((job.id, job.revision))

    def _pump(self, kernel: Kernel) -> None:
        hints = kernel.dispatch_batch(
            limit=self.settings.dispatch_batch, rehint_after=self.settings.rehint_after
        )
        if not hints:
            return
        try:
            with self.app.producer_or_acquire() as producer:
                publish_hints(
                    self.app,
                    producer,
                    hints,
                    batch_max=self.settings.batch_max,
                    hint_options=self.hint_options,
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
