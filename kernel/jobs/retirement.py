"""When a scheduled job has no firings left: a one-shot that fired, a schedule past its
``end``, a job whose schedule made its ``max_runs`` runs. Such a job is retired (disabled,
event ``job_disabled`` with the reason, its schedule spent) in the transaction that made
its last firing; the firings it made still run (``JOB_ALLOWS_CLAIM``).

A job's runs are the firings its schedule made that were not skipped (a backfill's
included), counted on the job row as they are made (``jobs.scheduled_runs``), under the
row the maker holds: history pruned later does not give runs back.
"""

from __future__ import annotations

from typing import Any

from kernel.events import EventType
from kernel.transaction.tx import Tx
from kernel.transitions import door
from kernel.transitions.jobs import SCHEDULE_COUNTS_RUNS, SCHEDULE_RETIRES_JOB

__all__ = [
    "MAX_RUNS_REACHED",
    "ONE_SHOT_FIRED",
    "SCHEDULE_ENDED",
    "count_runs",
    "retire",
    "retirement",
    "runs_left",
]

#: Reasons of the ``job_disabled`` event that retires a job.
ONE_SHOT_FIRED = "one_shot_fired"
SCHEDULE_ENDED = "schedule_ended"
MAX_RUNS_REACHED = "max_runs_reached"


def runs_left(schedule: dict[str, Any] | None, made: int) -> int | None:
    """How many more runs the job's ``schedule.max_runs`` allows after the ``made`` its
    schedule made (``jobs.scheduled_runs``); None without a bound."""
    bound = schedule.get("max_runs") if schedule else None
    return None if bound is None else max(int(bound) - made, 0)


def count_runs(tx: Tx, job_id: str, revision: int, made: int) -> int:
    """Count ``made`` more runs of the job's schedule; the job's count after them."""
    params = {"job_id": job_id, "expected_revision": revision, "made": made}
    counted = door.run(tx, SCHEDULE_COUNTS_RUNS, params)
    assert counted is not None, "the maker holds the job's row at this revision"
    return int(counted.scheduled_runs)


def retirement(schedule: dict[str, Any] | None, exhausted: bool, left: int | None) -> str | None:
    """Why a job that just fired is retired, or None: ``exhausted`` means its schedule
    has no firing after these (no next cursor); ``left`` is :func:`runs_left` after them."""
    if left == 0:
        return MAX_RUNS_REACHED
    if not exhausted or not schedule:
        return None
    if "at" in schedule or "in" in schedule:
        return ONE_SHOT_FIRED
    return SCHEDULE_ENDED if "end" in schedule else None


def retire(tx: Tx, job_id: str, revision: int, reason: str, **data: Any) -> None:
    """Disable the job (if still at ``revision`` and enabled) with event ``job_disabled``
    giving ``reason``: its ``ttl`` / ``delete_after_run`` count from here."""
    params = {"job_id": job_id, "expected_revision": revision, "now": tx.now}
    retired = door.run_count(tx, SCHEDULE_RETIRES_JOB, params)
    if retired:
        tx.emit(EventType.JOB_DISABLED, job_id=job_id, revision=revision, reason=reason, **data)
