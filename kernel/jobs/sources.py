"""Where job definitions come from, so a source can retire the jobs it no longer defines.

A declarative source (Celery's ``beat_schedule``) re-applies its whole set at every
start. A job whose entry was removed must stop firing but keep its history, so the
source records which job ids it owns; syncing disables the ones it no longer lists
(``job_retired``) and re-enables a retired one that comes back (``job_restored``),
to it or to another source (an entry moved from one Beat's schedule to another's).
Several sources share a kernel: each retires only the jobs it owns (the last to list
a job owns it). A job an operator disabled by hand stays disabled: only retirement
is undone.
The table is ``job_sources`` (see :mod:`kernel.db.schema`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import sqlalchemy as sa

from kernel.db.schema import jobs
from kernel.events import EventType
from kernel.jobs.definitions import set_enabled
from kernel.transaction.tx import Tx
from kernel.transitions import door
from kernel.transitions.jobs import SOURCE_OWNS_JOBS, SOURCE_RESTORES_JOB, SOURCE_RETIRES_JOB

__all__ = ["SourceSync", "sync_source"]


@dataclass(frozen=True)
class SourceSync:
    """What :func:`sync_source` changed: job ids disabled and re-enabled, sorted."""

    retired: list[str]
    restored: list[str]


def sync_source(tx: Tx, source: str, owned: Mapping[str, str]) -> SourceSync:
    """Record that ``source`` defines exactly the jobs ``owned`` (job id -> entry name).

    Jobs it owned before and no longer lists are disabled; retired ones it lists
    again are enabled. Ids without a job (never applied, or deleted) are ignored.
    """
    keep = sorted(
        tx.conn.execute(sa.select(jobs.c.id).where(jobs.c.id.in_(sorted(owned)))).scalars()
    )
    listing = {"of_source": source, "keep": keep, "now": tx.now}
    restored = [row.job_id for row in door.run_all(tx, SOURCE_RESTORES_JOB, listing)]
    door.run_many(
        tx,
        SOURCE_OWNS_JOBS,
        [{"job_id": i, "source": source, "name": owned[i], "retired_at": None} for i in keep],
    )
    retired = door.run_all(tx, SOURCE_RETIRES_JOB, listing)
    for row in retired:
        set_enabled(tx, row.job_id, False)
        tx.emit(EventType.JOB_RETIRED, job_id=row.job_id, source=source, name=row.name)
    for job_id in restored:
        set_enabled(tx, job_id, True)
        tx.emit(EventType.JOB_RESTORED, job_id=job_id, source=source, name=owned[job_id])
    return SourceSync(sorted(row.job_id for row in retired), sorted(restored))
