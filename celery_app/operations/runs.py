"""Runs over time, for charts: a job's latest runs (outcome, duration) and how many runs
settled and failed per interval (throughput). Both are bounded reads of the occurrence
table and the event log."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery_app.operations.times import iso
from kernel import EventType, Kernel

__all__ = ["FAILED_EVENTS", "job_runs", "throughput"]

#: A run ended badly: an attempt failed (retried or not) or its outcome is unknown.
FAILED_EVENTS = (
    EventType.OCCURRENCE_RETRY_WAIT,
    EventType.OCCURRENCE_DEAD_LETTER,
    EventType.OCCURRENCE_NEEDS_ADJUDICATION,
)
_COUNTED = (EventType.OCCURRENCE_SUCCEEDED, *FAILED_EVENTS)
_CLAIMS_READ = 1000
_EVENTS_READ = 10_000
_PAGE = 1000


def job_runs(kernel: Kernel, job_id: str, limit: int) -> list[dict[str, Any]]:
    """The job's latest ``limit`` occurrences, oldest first: id, status, when scheduled,
    and ``duration_s`` from its last claim to its settle (None while unsettled or when
    it never ran)."""
    found = kernel.list_occurrences(job_id=job_id, limit=limit)
    claims = kernel.events(
        job_id=job_id,
        types=[EventType.OCCURRENCE_CLAIMED],
        before_id=2**63 - 1,
        limit=_CLAIMS_READ,
    )
    claimed_at = {e.occurrence_id: e.at for e in claims}  # oldest first: the last claim wins
    runs = []
    for occ in reversed(found):
        claimed = claimed_at.get(occ.id)
        ran = occ.settled_at - claimed if claimed and occ.settled_at else None
        runs.append(
            {
                "id": occ.id,
                "status": occ.status.value,
                "scheduled_for": iso(occ.scheduled_for),
                "settled_at": iso(occ.settled_at),
                "duration_s": ran.total_seconds() if ran is not None else None,
            }
        )
    return runs


def throughput(kernel: Kernel, window_s: float, buckets: int) -> dict[str, Any]:
    """Runs that succeeded and attempts that failed (:data:`FAILED_EVENTS`) per interval
    over the last ``window_s`` seconds, in ``buckets`` intervals, oldest first.

    At most 10,000 events are read (``partial`` then says the oldest were left out).
    """
    now = kernel.now()
    start = now - timedelta(seconds=window_s)
    step = window_s / buckets
    counts = [{"succeeded": 0, "failed": 0} for _ in range(buckets)]
    # Newest first, back to the window's start: the scan stops there (no index on time).
    read, before, partial = 0, 2**63 - 1, False
    while True:
        page = kernel.events(before_id=before, types=_COUNTED, limit=_PAGE)
        inside = [e for e in page if e.at >= start]
        for event in inside:
            index = min(int((event.at - start).total_seconds() // step), buckets - 1)
            key = "succeeded" if event.type == EventType.OCCURRENCE_SUCCEEDED else "failed"
            counts[index][key] += 1
        read += len(page)
        if len(inside) < len(page) or len(page) < _PAGE:
            break
        if read >= _EVENTS_READ:
            partial = True
            break
        before = page[0].id
    return {
        "start": iso(start),
        "end": iso(now),
        "bucket_s": step,
        "buckets": [
            {"at": iso(start + timedelta(seconds=i * step)), **count}
            for i, count in enumerate(counts)
        ],
        "partial": partial,
    }
