"""Per-job history limits: a job's ``history: {succeeded: N}`` keeps only its newest N
successes (Kubernetes' successfulJobsHistoryLimit), applied by Beat's retention pass
beside the per-status ages.

Each (job, status) is one guarded DELETE that decides inside itself which runs are past
the limit (ordered by ``settled_at``, newest kept, on the ``occurrences_job`` index) and
still carry a status history may lose. Dead letters are unresolved until an operator
requeues them and are never pruned (SPEC §6): ``history.failed`` is refused at
definition, and a job stored with it from an earlier release keeps every dead letter.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from kernel import statements as st
from kernel.db.schema import jobs
from kernel.events import EventType
from kernel.records import loads
from kernel.states import OccurrenceStatus
from kernel.transaction.tx import Tx
from kernel.upkeep.history import forget, forget_chords

__all__ = ["LIMITED_STATUSES", "limit_history"]

#: The spec's ``history`` keys and the status each limits (each one of
#: :data:`kernel.states.RESOLVED`, which the DELETE checks again).
LIMITED_STATUSES: dict[str, OccurrenceStatus] = {"succeeded": OccurrenceStatus.SUCCEEDED}

# Canonical JSON: a spec with history limits holds this key exactly as written.
_LIMITED_JOBS = (
    sa.select(jobs.c.id, jobs.c.spec).where(jobs.c.spec.like('%"history":{%')).order_by(jobs.c.id)
)


def limit_history(tx: Tx, limit: int) -> dict[str, int]:
    """Delete the runs past each job's ``history`` limits, at most ``limit`` in all.

    Returns:
        ``occurrences`` and ``events`` deleted; one ``history_pruned`` event (with the
        job, status, the number kept and the deleted runs' trigger keys) per job and
        status that lost any.
    """
    deleted = pruned_events = 0
    for row in tx.conn.execute(_LIMITED_JOBS).all():
        limits: dict[str, Any] = loads(row.spec).get("history") or {}
        for key, status in LIMITED_STATUSES.items():
            keep = limits.get(key)
            budget = limit - deleted
            if keep is None or budget <= 0:
                continue
            params = {"job_id": row.id, "status": status.value, "keep": keep, "limit": budget}
            gone = tx.conn.execute(st.DELETE_PAST_HISTORY_LIMIT, params).all()
            if not gone:
                continue
            ids = [r.id for r in gone]
            their_events = forget(tx, ids, requests_before=tx.now)
            tx.emit(
                EventType.HISTORY_PRUNED,
                job_id=row.id,
                occurrences=len(ids),
                events=their_events,
                chords=forget_chords(tx, [r.chord for r in gone]),
                statuses=[status.value],
                kept=keep,
                reason="history",
                # `why` names a firing whose occurrence went (at most `limit` keys).
                trigger_keys=sorted(r.trigger_key for r in gone),
            )
            deleted += len(ids)
            pruned_events += their_events
    return {"occurrences": deleted, "events": pruned_events}
