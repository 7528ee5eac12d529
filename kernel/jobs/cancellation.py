"""Job-level cancel (``kernel jobs cancel JOB [--cascade]``).

A job cancel disables the job, cancels its waiting occurrences at once and asks its
running ones to stop (each through the guarded CANCEL of an occurrence cancel); with
``cascade`` it does the same to every job chained after it, breadth first, down to
the chain depth limit. Each job's row is held first (PostgreSQL), so no firing,
run-now or chained child of it is admitted while it is being cancelled. The whole
tree is one transaction, idempotent by request id like every operator action.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from kernel.db.schema import jobs, occurrences
from kernel.events import EventType
from kernel.limits.chaining import MAX_CHAIN_DEPTH
from kernel.occurrences.chains import cancelled_links
from kernel.occurrences.control import request_cancel
from kernel.occurrences.firing import lock_job
from kernel.occurrences.rows import record_request
from kernel.states import ACTIVE, OccurrenceStatus
from kernel.transaction.tx import Tx
from kernel.transitions import door
from kernel.transitions.jobs import OPERATOR_CANCELS_JOB

__all__ = ["JobCancel", "cancel_job"]

S = OccurrenceStatus
OCC = occurrences


@dataclass(frozen=True, slots=True)
class JobCancel:
    """What one job cancel did. ``jobs``: the job and (cascade) its chained descendants,
    parents first; ``disabled``: those this call disabled; ``cancelled``: occurrences
    cancelled at once; ``stopping``: running ones asked to stop (or already asked)."""

    request_id: str
    deduplicated: bool
    jobs: tuple[str, ...]
    disabled: tuple[str, ...] = ()
    cancelled: tuple[int, ...] = ()
    stopping: tuple[int, ...] = ()


def _tree(tx: Tx, root: str, cascade: bool) -> list[str]:
    """``root`` and, with ``cascade``, its chained descendants (cycle- and depth-guarded)."""
    order, level = [root], [root]
    seen = {root}
    depth = 1
    while cascade and level and depth < MAX_CHAIN_DEPTH + 1:
        children = (
            tx.conn.execute(
                sa.select(jobs.c.id).where(jobs.c.after_job.in_(level)).order_by(jobs.c.id)
            )
            .scalars()
            .all()
        )
        level = [c for c in children if c not in seen]
        seen.update(level)
        order.extend(level)
        depth += 1
    return order


def cancel_job(tx: Tx, job_id: str, *, cascade: bool, request_id: str, operator: str) -> JobCancel:
    """Disable ``job_id`` and cancel its work (with ``cascade``: its chained jobs' too).

    Raises:
        NotFound: no such job.
        EvidenceConflict: the request id was used for another action, or with the
            other ``cascade``.
    """
    lock_job(tx, job_id)  # NotFound before the request is recorded
    replay = record_request(tx, request_id, "cancel_job", job_id, {"cascade": cascade}, operator)
    tree = _tree(tx, job_id, cascade)
    if replay:
        return JobCancel(request_id, True, tuple(tree))
    disabled: list[str] = []
    cancelled: list[int] = []
    stopping: list[int] = []
    for each in tree:
        lock_job(tx, each)
        changed = door.run(
            tx, OPERATOR_CANCELS_JOB, {"job_id": each, "enabled": False, "now": tx.now}
        )
        if changed is not None:
            disabled.append(each)
            tx.emit(
                EventType.JOB_DISABLED, job_id=each, revision=changed.revision, reason="cancelled"
            )
        active = tx.conn.execute(
            sa.select(OCC.c.id)
            .where(OCC.c.job_id == each, OCC.c.status.in_(ACTIVE))
            .order_by(OCC.c.id)
        ).scalars()
        mine: list[int] = []
        asked: list[int] = []
        for occurrence_id in active:
            moved = request_cancel(tx, occurrence_id, reason=f"job_cancel:{operator}")
            if moved == S.CANCELLED:
                cancelled_links(tx, occurrence_id)
            if moved is None:
                # Nothing moved: running and asked already (it is stopping), or it ended
                # since it was listed (an occurrence cancel, a settle): not ours to report.
                status = tx.conn.execute(
                    sa.select(OCC.c.status).where(OCC.c.id == occurrence_id)
                ).scalar()
                moved = S.RUNNING if status == S.RUNNING else None
            if moved is not None:
                (asked if moved == S.RUNNING else mine).append(occurrence_id)
        cancelled.extend(mine)
        stopping.extend(asked)
        tx.emit(
            EventType.JOB_CANCELLED,
            job_id=each,
            request_id=request_id,
            operator=operator,
            root=job_id,
            cascade=cascade,
            cancelled=mine,
            stopping=asked,
        )
    return JobCancel(
        request_id, False, tuple(tree), tuple(disabled), tuple(cancelled), tuple(stopping)
    )
