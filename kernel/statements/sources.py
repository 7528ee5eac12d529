"""Job sources' statements: which source (a job file, the app's beat_schedule) owns a job.

``SYNC`` decides in each WHERE: a row is restored only while retired, retired only while
live and no longer listed, so a replay of the same listing changes nothing.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import bindparam as p
from sqlalchemy.dialects import postgresql, sqlite

from kernel.db.schema import job_sources, jobs

__all__ = ["RESTORE_LISTED_JOBS", "OWN_JOBS", "RETIRE_UNLISTED_JOBS", "FORGET_JOB_SOURCE"]

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
