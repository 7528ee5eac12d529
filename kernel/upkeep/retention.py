"""Retention: settled history and finished jobs deleted by age, in bounded batches.

Beat applies it on its own (``KERNEL_RETENTION_*``); ``kernel prune`` is the manual
form. Only finished history goes: succeeded, cancelled and skipped occurrences older
than their status's age, and a job's successes past its ``history`` limit. Dead letters
and occurrences needing adjudication are unresolved and never pruned. A job is deleted
when it is finished and asked for it: ``delete_after_run`` (a one-shot job that ran) at
once, ``ttl`` that long after it finished; finished means disabled (a one-shot job is
disabled once it fired), every occurrence settled and resolved, and no job chained after
it. A budget's counters of a window that ended more than the longest window ago go too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from kernel.db.schema import jobs
from kernel.errors import InvalidArgument
from kernel.events import EventType
from kernel.records import loads
from kernel.transaction.tx import Tx
from kernel.transitions import door
from kernel.transitions.jobs import RETENTION_EXPIRES_JOB, RETENTION_FORGETS_JOB_SOURCE
from kernel.transitions.limits import RETENTION_PRUNES_BUDGET_WINDOWS
from kernel.upkeep.history import PRUNABLE, prune
from kernel.upkeep.history_limits import limit_history

__all__ = ["checked_ages", "expire", "expire_jobs", "prune_budget_windows", "prune_history"]


# Canonical JSON: a spec asking for deletion holds one of these exactly as written.
_ASKS = sa.or_(jobs.c.spec.like('%"delete_after_run":true%'), jobs.c.spec.like('%"ttl":%'))


def expire_jobs(tx: Tx, limit: int) -> list[str]:
    """Delete up to ``limit`` finished jobs that asked for it (delete_after_run, ttl)."""
    candidates = tx.conn.execute(
        sa.select(jobs.c.id, jobs.c.revision, jobs.c.spec)
        .where(sa.not_(jobs.c.enabled), _ASKS)
        .order_by(jobs.c.updated_at, jobs.c.id)
        .limit(limit)
    ).all()
    deleted: list[str] = []
    for row in candidates:
        spec = loads(row.spec)
        after_run = bool(spec.get("delete_after_run"))
        ttl = spec.get("ttl")
        if not after_run and ttl is None:
            continue  # the pattern matched inside a payload
        age_ms = 0 if after_run else int(ttl * 1000)
        gone = door.run(
            tx,
            RETENTION_EXPIRES_JOB,
            {
                "job_id": row.id,
                "revision": row.revision,
                "cutoff": tx.now - age_ms,
                "needs_run": after_run,
            },
        )
        if gone is None:
            continue
        door.run_count(tx, RETENTION_FORGETS_JOB_SOURCE, {"job_id": row.id})
        deleted.append(row.id)
        tx.emit(
            EventType.JOB_EXPIRED,
            job_id=row.id,
            revision=row.revision,
            reason="delete_after_run" if after_run else "ttl",
            **({} if after_run else {"ttl": ttl}),
        )
    return deleted


#: No budget window is longer than 31 days, so one that began twice that long ago ended
#: at least 31 days ago: nothing reserves in it any more, and ``kernel budgets`` shows a
#: later one (or none: the budget's current window is empty).
BUDGET_WINDOW_KEPT_MS = 2 * 31 * 86_400_000


def prune_budget_windows(tx: Tx, limit: int) -> int:
    """Delete up to ``limit`` budget windows that ended long ago; how many went."""
    params = {"cutoff": tx.now - BUDGET_WINDOW_KEPT_MS, "limit": limit}
    return door.run_count(tx, RETENTION_PRUNES_BUDGET_WINDOWS, params)


def checked_ages(ages: Mapping[str, float | None]) -> dict[str, float | None]:
    """``ages`` (seconds to keep each prunable status's history; None: kept), checked.

    Raises:
        InvalidArgument: an age for a status that is not prunable, or not positive.
    """
    for status, age in ages.items():
        if status not in PRUNABLE:
            raise InvalidArgument("retention", f"{status!r} is not prunable ({PRUNABLE})")
        if age is not None and age <= 0:
            raise InvalidArgument(f"retention.{status}", "must be positive")
    return dict(ages)


def prune_history(tx: Tx, ages: Mapping[str, float | None], limit: int) -> dict[str, int]:
    """One step of a retention pass: each status's history older than its age (``ages``
    from :func:`checked_ages`), then each job's runs past its ``history`` limits
    (:mod:`kernel.upkeep.history_limits`); at most ``limit`` occurrences.

    Returns:
        ``occurrences`` and ``events`` pruned; fewer than ``limit`` occurrences: none left.
    """
    pruned = {"occurrences": 0, "events": 0}
    budget = limit
    for status, age in ages.items():
        if age is None or budget <= 0:
            continue
        done = prune(tx, settled_before=tx.now - int(age * 1000), limit=budget, statuses=(status,))
        pruned = {key: pruned[key] + done[key] for key in pruned}
        budget -= done["occurrences"]
    if budget > 0:  # per-job history limits (a job's ``history``), after the ages
        done = limit_history(tx, budget)
        pruned = {key: pruned[key] + done[key] for key in pruned}
    return pruned


def expire(tx: Tx, limit: int) -> dict[str, Any]:
    """The end of a retention pass: finished jobs deleted (``jobs``, their ids) and budget
    windows pruned (``budget_windows``), at most ``limit`` of each."""
    return {"jobs": expire_jobs(tx, limit), "budget_windows": prune_budget_windows(tx, limit)}
