"""Runtime controls every actor applies: ending a control when its occurrence settles (every
settling path), and asking an occurrence to cancel (an operator, a job cancel, ``replace``)."""

from __future__ import annotations

from kernel.events import EventType
from kernel.limits import budgets
from kernel.states import OccurrenceStatus
from kernel.transaction.tx import Tx
from kernel.transitions import controls as TC
from kernel.transitions import door, notices
from kernel.transitions import occurrences as T

__all__ = ["end_control", "request_cancel"]

S = OccurrenceStatus


def end_control(tx: Tx, occurrence_id: int, *, job_id: str, fence: int | None) -> None:
    """Make the occurrence's control ``terminal``; a pause still pending ends with an event."""
    ended = door.run(tx, TC.CONTROL_ENDS, {"occurrence_id": occurrence_id, "now": tx.now})
    if ended is not None and ended.pause_request_id is not None and ended.paused_at is None:
        tx.emit(
            EventType.CONTROL_TERMINAL,
            job_id=job_id,
            occurrence_id=occurrence_id,
            fence=fence,
            request_id=ended.pause_request_id,
            revision=ended.revision,
        )


def request_cancel(
    tx: Tx, occurrence_id: int, *, reason: str, running: bool = True
) -> OccurrenceStatus | None:
    """Cancel at once if waiting; flag a running one for its worker (unless ``running`` is
    false: then only a run not started is cancelled). Returns the status this left
    (``cancelled``, or ``running`` when flagged); None: nothing to do (already asked, a
    running one left be, or it ended, perhaps just now)."""
    moved = door.run(
        tx,
        T.OPERATOR_CANCELS,
        {"occurrence_id": occurrence_id, "now": tx.now, "stop_running": running},
    )
    if moved is None:
        return None
    if moved.status == S.CANCELLED:
        end_control(tx, occurrence_id, job_id=moved.job_id, fence=moved.fence)
    tx.emit(
        EventType.OCCURRENCE_CANCEL_REQUESTED
        if moved.status == S.RUNNING
        else EventType.OCCURRENCE_CANCELLED,
        job_id=moved.job_id,
        occurrence_id=occurrence_id,
        fence=moved.fence,
        reason=reason,
    )
    if moved.status == S.CANCELLED:
        notices.owe_result(tx, occurrence_id, moved.fence, S.CANCELLED)
    if moved.status == S.CANCELLED and moved.attempt == 0:
        budgets.release(tx, occurrence_id, job_id=moved.job_id)  # it never ran
    return S(moved.status)
