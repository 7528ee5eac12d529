"""Job health at a glance: last success, last failure, consecutive failures, next firing.

Read from the occurrences themselves, one query for any number of jobs: a run that
ended ``succeeded`` is a success, one that ended ``dead_letter`` (attempts exhausted,
not retryable, abandoned) a failure; a failed attempt that is retried is not one yet.
``consecutive_failures`` counts the failures settled after the job's last success (all
of them when it never succeeded). Each figure is an index seek on ``occurrences_job``
(job_id, status, settled_at), so the cost grows with the number of jobs asked about
and their failures in a row, not with their history. What retention pruned is not
seen: a success older than ``kernel_retention_succeeded`` (or past the job's
``history.succeeded``) no longer counts as the last one.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from kernel.db.schema import jobs, occurrences
from kernel.records import to_dt
from kernel.reports import JobHealth
from kernel.states import OccurrenceStatus
from kernel.transaction.tx import Tx

__all__ = ["JobHealth", "job_health", "job_health_query"]

OCC = occurrences


def _last_settled(status: OccurrenceStatus) -> sa.ScalarSelect[Any]:
    settled = OCC.alias(f"settled_{status.value}")
    return (
        sa.select(sa.func.max(settled.c.settled_at))
        .where(settled.c.job_id == jobs.c.id, settled.c.status == status.value)
        .correlate(jobs)
        .scalar_subquery()
    )


def job_health_query() -> sa.Select[Any]:
    """The health of every job, one row each (job_id, enabled, next_fire_at, the figures)."""
    last_success = _last_settled(OccurrenceStatus.SUCCEEDED)
    failures_since = (
        sa.select(sa.func.count())
        .where(
            OCC.c.job_id == jobs.c.id,
            OCC.c.status == OccurrenceStatus.DEAD_LETTER.value,
            OCC.c.settled_at > sa.func.coalesce(last_success, -1),
        )
        .correlate(jobs)
        .scalar_subquery()
    )
    return sa.select(
        jobs.c.id,
        jobs.c.enabled,
        jobs.c.next_fire_at,
        last_success.label("last_success_at"),
        _last_settled(OccurrenceStatus.DEAD_LETTER).label("last_failure_at"),
        failures_since.label("consecutive_failures"),
    ).order_by(jobs.c.id)


_HEALTH = job_health_query()


def job_health(tx: Tx, job_id: str | None = None) -> dict[str, JobHealth]:
    """The health of every job (or only ``job_id``), by job id; an unknown id gives {}."""
    query = _HEALTH if job_id is None else _HEALTH.where(jobs.c.id == job_id)
    return {
        row.id: JobHealth(
            job_id=row.id,
            last_success_at=to_dt(row.last_success_at),
            last_failure_at=to_dt(row.last_failure_at),
            consecutive_failures=int(row.consecutive_failures),
            next_fire_at=to_dt(row.next_fire_at) if row.enabled else None,
        )
        for row in tx.conn.execute(query)
    }
