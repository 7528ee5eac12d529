"""Backfill: occurrences for a job's firings over a chosen past (or future) range.

The caller plans the firings from the job's schedule (Beat's own trigger keys and due
times, :mod:`beat_schedule.timing`), naming the revision it planned from; here, in one
transaction holding the job row, each becomes an occurrence unless its firing exists
already (under any revision: the unique (job, trigger key) decides), so a backfill run
twice creates nothing the second time. Each new one is admitted by the job's overlap
policy and ``max_queued`` as a Beat firing is (a refused one is recorded skipped with the
reason), or, ``sequential``, queued without admission as an exclusive run in firing
order: one runs at a time, the earliest waiting first. One ``job_backfilled`` event
records the request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from kernel.db.schema import occurrences
from kernel.errors import RevisionConflict
from kernel.events import EventType
from kernel.jobs.retirement import count_runs
from kernel.occurrences.firing import admit, create_gated, lock_job
from kernel.spec.run_params import with_params
from kernel.states import OccurrenceStatus
from kernel.transaction.tx import Tx

__all__ = ["BackfillReport", "backfill", "existing_firings"]

S = OccurrenceStatus
#: Trigger keys looked up per statement when a dry run asks which firings exist.
_KEYS_PER_QUERY = 500


@dataclass(frozen=True, slots=True)
class BackfillReport:
    """What one backfill did: occurrences made, firings skipped (trigger key, reason), and
    firings that existed already (trigger key, occurrence id)."""

    created: tuple[int, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()
    existing: tuple[tuple[str, int], ...] = field(default=())


def backfill(
    tx: Tx,
    job_id: str,
    *,
    expected_revision: int,
    firings: Sequence[tuple[str, int]],
    params: dict[str, Any] | None,
    sequential: bool,
    operator: str,
    summary: dict[str, Any],
) -> BackfillReport:
    """Make an occurrence of each ``(trigger key, due ms)`` not made yet, in order.

    ``summary`` (the range asked for, how many firings it held) goes into the event.

    Raises:
        NotFound: no such job.
        RevisionConflict: the job is no longer at ``expected_revision`` (the firings
            were planned from another schedule).
        InvalidArgument: ``params`` (see :mod:`kernel.spec.run_params`).
    """
    job = lock_job(tx, job_id)
    if job.revision != expected_revision:
        raise RevisionConflict(
            f"job {job_id!r} is at revision {job.revision}, not {expected_revision}: its "
            "firings were planned from another definition; plan the backfill again",
            job_id=job_id,
            expected_revision=expected_revision,
            actual_revision=job.revision,
        )
    spec = job.spec if params is None else with_params(job.spec, params)
    created: list[int] = []
    skipped: list[tuple[str, str]] = []
    existing: list[tuple[str, int]] = []
    for index, (key, due) in enumerate(firings):
        made = create_gated(
            tx,
            job_id=job_id,
            spec=spec,
            refused=None if sequential else admit(tx, job_id, spec),
            revision=job.revision,
            trigger_key=key,
            scheduled_for=due,
            # In firing order: the dispatch pump and claims take the earliest first.
            available_at=tx.now + index if sequential else None,
            exclusive=sequential,  # claims then run one at a time
            params=params,
        )
        if not made.created:
            if made.id is not None:
                existing.append((key, made.id))
        elif made.status == S.SKIPPED:
            skipped.append((key, made.skip_reason or "skipped"))
        elif made.id is not None:
            created.append(made.id)
    if created:  # runs of its schedule: they count toward its max_runs
        count_runs(tx, job_id, job.revision, len(created))
    recorded: dict[str, Any] = {
        "operator": operator,
        "revision": job.revision,
        "created": len(created),
        "skipped": len(skipped),
        "existing": len(existing),
        "sequential": sequential,
        **summary,
    }
    if params is not None:
        recorded["params"] = params
    tx.emit(EventType.JOB_BACKFILLED, job_id=job_id, **recorded)
    return BackfillReport(tuple(created), tuple(skipped), tuple(existing))


def existing_firings(tx: Tx, job_id: str, trigger_keys: Sequence[str]) -> dict[str, int]:
    """Which of ``trigger_keys`` the job has an occurrence of: trigger key -> its id."""
    found: dict[str, int] = {}
    for start in range(0, len(trigger_keys), _KEYS_PER_QUERY):
        chunk = list(trigger_keys[start : start + _KEYS_PER_QUERY])
        rows = tx.conn.execute(
            sa.select(occurrences.c.trigger_key, occurrences.c.id).where(
                occurrences.c.job_id == job_id, occurrences.c.trigger_key.in_(chunk)
            )
        )
        found.update({row.trigger_key: row.id for row in rows})
    return found
