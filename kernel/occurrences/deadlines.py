"""Start deadlines (Celery's ``expires``): an occurrence not started by its ``expires_at``
is never started. Whoever meets it first settles it skipped ``expired``, with its event: a
claim (:func:`skip_expired` of one id, kernel/occurrences/claiming.py) or Beat's upkeep
(:func:`skip_expired` of every one), so one with no worker does not wait either."""

from __future__ import annotations

from kernel.events import EventType
from kernel.limits import budgets
from kernel.occurrences.control import end_control
from kernel.records import to_dt
from kernel.transaction.tx import Tx
from kernel.transitions import door
from kernel.transitions import occurrences as T
from kernel.types import iso_z

__all__ = ["deadline_ms", "skip_expired"]


def deadline_ms(available_at: int, expires_s: float | None) -> int | None:
    """The start deadline of an occurrence that may first start at ``available_at`` (ms)
    and expires ``expires_s`` after it (None: no deadline). Counted from the time it may
    start, as Celery counts from when Beat or the caller sends the message."""
    return None if expires_s is None else available_at + round(expires_s * 1000)


def skip_expired(tx: Tx, *, occurrence_id: int | None = None, limit: int = 200) -> int:
    """Settle skipped ``expired`` the occurrence ``occurrence_id`` if its deadline passed
    (None: up to ``limit`` of every such one); how many were."""
    params = {"now": tx.now, "occurrence_id": occurrence_id, "limit": limit}
    skipped = door.run_all(tx, T.START_DEADLINE_PASSES, params)
    for row in skipped:
        # A resumed run's control ends with it; a run that never started gives back
        # the budget it reserved (a retry's first attempt spent it).
        end_control(tx, row.id, job_id=row.job_id, fence=row.fence)
        if row.attempt == 0:
            budgets.release(tx, row.id, job_id=row.job_id)
        tx.emit(
            EventType.OCCURRENCE_SKIPPED,
            job_id=row.job_id,
            occurrence_id=row.id,
            fence=row.fence,
            reason="expired",
            expires_at=iso_z(to_dt(row.expires_at)),
        )
    return len(skipped)
