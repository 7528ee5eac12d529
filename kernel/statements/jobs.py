"""Statements that change a job definition's state: enable/disable and delete.

Each decides in its own WHERE: the flag still being the other way, or nothing of the
job still needing it (an unsettled occurrence, a chained child). Every path that makes
an occurrence holds the job's row (Beat's cursor CAS, ``admission.lock_job``), so a
delete that first locks the row sees every occurrence made before it and blocks
those made after.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import bindparam as p

from kernel.schema import jobs, occurrences
from kernel.states import RESOLVED, UNSETTLED

__all__ = ["SET_ENABLED", "DELETE_IDLE_JOB", "EXPIRE_FINISHED_JOB"]

#: Flip ``enabled`` only when it is the other way; the cursor is re-planned from now.
SET_ENABLED = (
    sa.update(jobs)
    .where(jobs.c.id == p("job_id"), jobs.c.enabled != p("enabled"))
    .values(
        enabled=p("enabled"),
        planned=False,
        next_fire_at=None,
        next_trigger_key=None,
        updated_at=p("now"),
    )
    .returning(jobs.c.revision)
)

_child = jobs.alias("child")

#: Delete a job with no unsettled occurrence and no chained child.
DELETE_IDLE_JOB = (
    sa.delete(jobs)
    .where(
        jobs.c.id == p("job_id"),
        ~sa.exists().where(
            occurrences.c.job_id == jobs.c.id,
            occurrences.c.status.in_([s.value for s in UNSETTLED]),
        ),
        ~sa.exists().where(_child.c.after_job == jobs.c.id),
    )
    .returning(jobs.c.revision)
)

#: Delete one finished job, deciding "finished" in the statement: disabled, unchanged
#: since it was read (revision), idle since the cutoff, every occurrence settled with
#: a final status and none settled after the cutoff, no child, and (delete_after_run)
#: at least one run.
EXPIRE_FINISHED_JOB = (
    sa.delete(jobs)
    .where(
        jobs.c.id == p("job_id"),
        jobs.c.revision == p("revision"),
        sa.not_(jobs.c.enabled),
        jobs.c.updated_at <= p("cutoff"),
        ~sa.exists().where(
            occurrences.c.job_id == jobs.c.id,
            sa.or_(
                occurrences.c.status.not_in(RESOLVED),
                occurrences.c.settled_at > p("cutoff"),
            ),
        ),
        ~sa.exists().where(_child.c.after_job == jobs.c.id),
        sa.or_(
            sa.not_(p("needs_run", type_=sa.Boolean)),
            sa.exists().where(occurrences.c.job_id == jobs.c.id),
        ),
    )
    .returning(jobs.c.id)
)
