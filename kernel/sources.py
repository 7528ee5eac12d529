"""Where job definitions come from, so a source can retire the jobs it no longer defines.

A declarative source (Celery's ``beat_schedule``) re-applies its whole set at every
start. A job whose entry was removed must stop firing but keep its history, so the
source records which job ids it owns; syncing disables the ones it no longer lists
(``job_retired``) and re-enables a retired one that comes back (``job_restored``).
A job an operator disabled by hand stays disabled: only retirement is undone.
The table is ``job_sources`` (see :mod:`kernel.schema`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from kernel.events import EventType
from kernel.jobs import set_enabled
from kernel.schema import job_sources, jobs
from kernel.tx import Tx

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
    existing = sa.select(jobs.c.id)
    keep = sorted(
        tx.conn.execute(sa.select(jobs.c.id).where(jobs.c.id.in_(sorted(owned)))).scalars()
    )
    restored = (
        tx.conn.execute(
            sa.update(job_sources)
            .where(
                job_sources.c.source == source,
                job_sources.c.job_id.in_(keep),
                job_sources.c.retired_at.is_not(None),
            )
            .values(retired_at=None)
            .returning(job_sources.c.job_id)
        )
        .scalars()
        .all()
    )
    if keep:
        insert = (postgresql.insert if tx.is_postgres else sqlite.insert)(job_sources)
        tx.conn.execute(
            insert.on_conflict_do_update(
                index_elements=[job_sources.c.job_id],
                set_={"source": insert.excluded.source, "name": insert.excluded.name},
            ),
            [{"job_id": i, "source": source, "name": owned[i], "retired_at": None} for i in keep],
        )
    retired = tx.conn.execute(
        sa.update(job_sources)
        .where(
            job_sources.c.source == source,
            job_sources.c.retired_at.is_(None),
            job_sources.c.job_id.not_in(keep),
            job_sources.c.job_id.in_(existing),
        )
        .values(retired_at=tx.now)
        .returning(job_sources.c.job_id, job_sources.c.name)
    ).all()
    for job_id, name in retired:
        set_enabled(tx, job_id, False)
        tx.emit(EventType.JOB_RETIRED, job_id=job_id, source=source, name=name)
    for job_id in restored:
        set_enabled(tx, job_id, True)
        tx.emit(EventType.JOB_RESTORED, job_id=job_id, source=source, name=owned[job_id])
    return SourceSync(sorted(job_id for job_id, _ in retired), sorted(restored))
