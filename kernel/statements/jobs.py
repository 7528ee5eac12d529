"""Statements that write a job definition: define and revise it, advance Beat's cursor,
enable/disable, retire and delete it; and which source (a job file, the app's
beat_schedule) owns it.

Each decides in its own WHERE: the revision and cursor the caller read still being the
job's, the flag still being the other way, or nothing of the job still needing it (an
unsettled occurrence, a chained child). Every path that makes an occurrence holds the
job's row (Beat's cursor CAS, ``firing.lock_job``), so a delete that first locks the
row sees every occurrence made before it and blocks those made after.

A bind named after a column of the row written is its new value (``digest``, ``spec``);
the row's current values are compared with ``expected_*`` binds.

A source's listing (``RESTORE_LISTED_JOBS``, ``RETIRE_UNLISTED_JOBS``) decides in each WHERE:
a row is restored only while retired, retired only while live and no longer listed, so a
replay of the same listing changes nothing.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import bindparam as p
from sqlalchemy.dialects import postgresql, sqlite

from kernel.db.schema import job_sources, jobs, occurrences
from kernel.states import RESOLVED, UNSETTLED

__all__ = [
    "DEFINE_JOB",
    "REVISE_JOB",
    "REVISE_LIVE_JOB",
    "PLAN_CURSOR",
    "ADVANCE_CURSOR",
    "SET_ENABLED",
    "RETIRE_JOB",
    "MARK_UNPLANNABLE",
    "COUNT_SCHEDULED_RUNS",
    "DELETE_IDLE_JOB",
    "EXPIRE_FINISHED_JOB",
    "RESTORE_LISTED_JOBS",
    "OWN_JOBS",
    "RETIRE_UNLISTED_JOBS",
    "FORGET_JOB_SOURCE",
]

#: A definition's columns; Beat plans its cursor afresh (unplanned, no next firing).
_DEFINITION: dict[str, Any] = {
    "digest": p("digest"),
    "spec": p("spec"),
    "enabled": p("enabled"),
    "planned": False,
    "next_fire_at": None,
    "next_trigger_key": None,
    "after_job": p("after_job"),
    "defined_at": p("now"),
    "updated_at": p("now"),
    "plan_error": None,
}


def _define(insert: Any) -> Any:
    """A new job at revision 1; a concurrent definer's row refuses it (no row returned)."""
    return (
        insert(jobs)
        .on_conflict_do_nothing()
        .values(id=p("job_id"), revision=1, **_DEFINITION)
        .returning(jobs.c.id)
    )


DEFINE_JOB = {"postgresql": _define(postgresql.insert), "sqlite": _define(sqlite.insert)}


def _revise(next_fire_at: Any) -> sa.Update:
    """The next revision of a job still at ``expected_revision``. A job its schedule
    retired stays so while the revision leaves it disabled (its firings still run)."""
    return (
        sa.update(jobs)
        .where(jobs.c.id == p("job_id"), jobs.c.revision == p("expected_revision"))
        .values(
            revision=jobs.c.revision + 1,
            schedule_spent=sa.and_(jobs.c.schedule_spent, sa.not_(p("enabled", sa.Boolean))),
            **{**_DEFINITION, "next_fire_at": next_fire_at},
        )
    )


#: A revision that disables the job or finds it disabled: its cursor is planned afresh.
REVISE_JOB = _revise(None)
#: A revision of a job enabled before and after: while unplanned, ``next_fire_at`` is
#: where Beat resumes planning, the old cursor if it was already due, else now.
REVISE_LIVE_JOB = _revise(
    sa.case(
        (jobs.c.next_fire_at < p("now"), jobs.c.next_fire_at), else_=p("now", type_=sa.BigInteger)
    )
)


def _advance(cursor_guard: sa.ColumnElement[bool]) -> sa.Update:
    """Beat's cursor compare-and-set: the job still enabled at ``expected_revision``
    with the cursor it planned from; the job's spec and the runs its schedule made
    (the row is held from here, so they stay so) when it moved."""
    return (
        sa.update(jobs)
        .where(
            jobs.c.id == p("job_id"),
            jobs.c.revision == p("expected_revision"),
            jobs.c.enabled,
            cursor_guard,
        )
        .values(
            planned=True,
            next_trigger_key=p("next_trigger_key"),
            next_fire_at=p("next_fire_at"),
            plan_error=None,
        )
        .returning(jobs.c.spec, jobs.c.scheduled_runs)
    )


#: The first advance of a cursor no Beat has planned yet.
PLAN_CURSOR = _advance(sa.and_(sa.not_(jobs.c.planned), jobs.c.next_trigger_key.is_(None)))
#: An advance from the planned cursor ``expected_cursor``.
ADVANCE_CURSOR = _advance(sa.and_(jobs.c.planned, jobs.c.next_trigger_key == p("expected_cursor")))

#: Flip ``enabled`` only when it is the other way; the cursor is re-planned from now.
#: An operator's disable holds the job's waiting firings, whatever retired it before.
SET_ENABLED = (
    sa.update(jobs)
    .where(jobs.c.id == p("job_id"), jobs.c.enabled != p("enabled"))
    .values(
        enabled=p("enabled"),
        schedule_spent=False,
        planned=False,
        next_fire_at=None,
        next_trigger_key=None,
        updated_at=p("now"),
    )
    .returning(jobs.c.revision)
)

#: Retire a job whose schedule has no firings left: disabled, if still enabled at
#: ``expected_revision``, its schedule spent (the firings it made still run).
RETIRE_JOB = (
    sa.update(jobs)
    .where(jobs.c.id == p("job_id"), jobs.c.revision == p("expected_revision"), jobs.c.enabled)
    .values(enabled=False, schedule_spent=True, updated_at=p("now"))
)

#: Record why Beat cannot plan the job still enabled at ``expected_revision``, once: a
#: revision already marked keeps its first error (no event per tick, per Beat).
MARK_UNPLANNABLE = (
    sa.update(jobs)
    .where(
        jobs.c.id == p("job_id"),
        jobs.c.revision == p("expected_revision"),
        jobs.c.enabled,
        jobs.c.plan_error.is_(None),
    )
    .values(plan_error=p("error"))
)

#: Count ``made`` runs of the job's schedule (Beat's firings, a backfill's), under the
#: row its maker holds: what ``max_runs`` bounds, whatever history is kept later.
COUNT_SCHEDULED_RUNS = (
    sa.update(jobs)
    .where(jobs.c.id == p("job_id"), jobs.c.revision == p("expected_revision"))
    .values(scheduled_runs=jobs.c.scheduled_runs + p("made", sa.Integer))
    .returning(jobs.c.scheduled_runs)
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

#: Retired jobs ``source`` lists (``keep``): its own come back, and one another source
#: retired comes back too (an entry moved from one Beat's schedule to another's).
RESTORE_LISTED_JOBS = (
    sa.update(job_sources)
    .where(
        job_sources.c.job_id.in_(p("keep", expanding=True)),
        job_sources.c.retired_at.is_not(None),
    )
    .values(retired_at=None)
    .returning(job_sources.c.job_id)
)


def _own(insert: Any) -> Any:
    """``source`` owns each job of the rows given, under the name its listing gives it."""
    statement = insert(job_sources)
    return statement.on_conflict_do_update(
        index_elements=[job_sources.c.job_id],
        set_={"source": statement.excluded.source, "name": statement.excluded.name},
    )


OWN_JOBS = {"postgresql": _own(postgresql.insert), "sqlite": _own(sqlite.insert)}

#: Live jobs of ``source`` it no longer lists (among those that still exist).
RETIRE_UNLISTED_JOBS = (
    sa.update(job_sources)
    .where(
        job_sources.c.source == p("of_source"),
        job_sources.c.retired_at.is_(None),
        job_sources.c.job_id.not_in(p("keep", expanding=True)),
        job_sources.c.job_id.in_(sa.select(jobs.c.id)),
    )
    .values(retired_at=p("now"))
    .returning(job_sources.c.job_id, job_sources.c.name)
)

#: A deleted job's ownership goes with it.
FORGET_JOB_SOURCE = sa.delete(job_sources).where(job_sources.c.job_id == p("job_id"))
