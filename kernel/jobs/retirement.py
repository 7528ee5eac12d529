"""When a scheduled job has no firings left: a one-shot that fired, a schedule past its
``end``, a job whose schedule made its ``max_runs`` runs. Such a job is retired (disabled,
event ``job_disabled`` with the reason) in the transaction that made its last firing.

A job's runs are the occurrences its schedule made (trigger keys of the schedule's kind,
``cron:`` or ``every:``; backfilled ones included, as they carry the same keys) that were
not skipped. They are counted under the job row Beat's cursor advance holds, up to
``max_runs`` and no further, so the count never reads more than the bound.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from kernel.db.schema import occurrences
from kernel.db.tx import Tx
from kernel.events import EventType
from kernel.states import OccurrenceStatus
from kernel.transitions import door
from kernel.transitions.jobs import SCHEDULE_RETIRES_JOB

__all__ = [
    "MAX_RUNS_REACHED",
    "ONE_SHOT_FIRED",
    "SCHEDULE_ENDED",
    "retire",
    "retirement",
    "runs_left",
]

#: Reasons of the ``job_disabled`` event that retires a job.
ONE_SHOT_FIRED = "one_shot_fired"
SCHEDULE_ENDED = "schedule_ended"
MAX_RUNS_REACHED = "max_runs_reached"

OCC = occurrences


def runs_left(tx: Tx, job_id: str, schedule: dict[str, Any] | None) -> int | None:
    """How many more runs the job's ``schedule.max_runs`` allows; None without one."""
    bound = schedule.get("max_runs") if schedule else None
    if schedule is None or bound is None:
        return None
    kind = "cron" if "cron" in schedule else "every"
    made = (
        sa.select(OCC.c.id)
        .where(
            OCC.c.job_id == job_id,
            # A range on the (job_id, trigger_key) unique index: the schedule's own keys.
            OCC.c.trigger_key >= f"{kind}:",
            OCC.c.trigger_key < f"{kind};",
            OCC.c.status != OccurrenceStatus.SKIPPED.value,
        )
        .limit(int(bound))
        .subquery()
    )
    counted = tx.conn.execute(sa.select(sa.func.count()).select_from(made)).scalar_one()
    return max(int(bound) - int(counted), 0)


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
