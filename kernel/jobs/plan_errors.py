"""Jobs Beat cannot plan: the error on the job's row, and the findings it makes.

Beat plans each job alone; when a job's schedule cannot be planned (or firing it is
refused), Beat records why on the row with event ``job_unplannable``, once per revision,
and ticks on with the others. ``kernel status`` and ``kernel doctor`` list the enabled
jobs holding such an error; the revision's next fire, or a new revision, clears it.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from kernel.db.schema import jobs
from kernel.events import EventType as E
from kernel.transaction.tx import Tx
from kernel.transitions import door
from kernel.transitions.jobs import BEAT_CANNOT_PLAN_JOB

__all__ = ["ERROR_MAX", "mark_unplannable", "unplannable_jobs"]

#: Characters of an error kept: enough to act on, bounded whatever raised it.
ERROR_MAX = 1000


def mark_unplannable(tx: Tx, job_id: str, revision: int, error: str) -> bool:
    """Record ``error`` for ``job_id`` at ``revision`` (event ``job_unplannable``).

    Returns:
        False when nothing was recorded: the job moved on (another revision, disabled,
        deleted) or this revision already holds an error.
    """
    error = error[:ERROR_MAX]
    params = {"job_id": job_id, "expected_revision": revision, "error": error}
    if not door.run_count(tx, BEAT_CANNOT_PLAN_JOB, params):
        return False
    tx.emit(E.JOB_UNPLANNABLE, job_id=job_id, revision=revision, error=error)
    return True


def unplannable_jobs(tx: Tx) -> list[dict[str, Any]]:
    """The enabled jobs Beat cannot plan, by id: ``job_id``, ``revision``, ``error``."""
    rows = tx.conn.execute(
        sa.select(jobs.c.id, jobs.c.revision, jobs.c.plan_error)
        .where(jobs.c.enabled, jobs.c.plan_error.is_not(None))
        .order_by(jobs.c.id)
    )
    return [{"job_id": r.id, "revision": r.revision, "error": r.plan_error} for r in rows]
