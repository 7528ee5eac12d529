"""Operator actions on occurrences: cancel, requeue.

Each is idempotent by request id (SPEC I7, :func:`kernel.occurrences.rows.record_request`).
Pause and resume are in :mod:`kernel.occurrences.pausing`.
"""

from __future__ import annotations

from kernel.errors import (
    EvidenceConflict,
    FenceConflict,
    StateConflict,
)
from kernel.events import EventType
from kernel.occurrences.chains import cancelled_links
from kernel.occurrences.control import request_cancel
from kernel.occurrences.rows import grant, occurrence_row, record_request
from kernel.records import loads
from kernel.states import OccurrenceStatus
from kernel.transaction.tx import Tx
from kernel.transitions import door
from kernel.transitions import occurrences as T

__all__ = ["requeue", "cancel"]

S = OccurrenceStatus


def requeue(
    tx: Tx,
    occurrence_id: int,
    *,
    expected_fence: int | None,
    expected_error_code: str | None,
    request_id: str,
    operator: str,
) -> bool:
    """Give a dead letter one more claim, consuming no attempt, if the given evidence holds."""
    evidence = {"fence": expected_fence, "error_code": expected_error_code}
    if record_request(tx, request_id, "requeue", str(occurrence_id), evidence, operator):
        return True
    revived = door.run(
        tx,
        T.OPERATOR_REQUEUES,
        {
            "occurrence_id": occurrence_id,
            "expected_fence": expected_fence,
            "expected_error_code": expected_error_code,
            "now": tx.now,
        },
    )
    if revived is None:
        o = occurrence_row(tx, occurrence_id)
        actual_code = (loads(o["last_error"]) or {}).get("code")
        if o["status"] != S.DEAD_LETTER:
            raise StateConflict(
                f"occurrence {occurrence_id} is {o['status']}, not dead_letter",
                occurrence_id=occurrence_id,
                status=o["status"],
            )
        if expected_fence is not None and o["fence"] != expected_fence:
            raise FenceConflict(
                f"occurrence {occurrence_id} is at fence {o['fence']}, not {expected_fence}",
                occurrence_id=occurrence_id,
                expected_fence=expected_fence,
                actual_fence=o["fence"],
            )
        if expected_error_code is None or actual_code == expected_error_code:
            # The guard holds now but did not when REQUEUE ran: it became a dead
            # letter meanwhile (PostgreSQL READ COMMITTED). This request came first.
            raise StateConflict(
                f"occurrence {occurrence_id} was not yet a dead letter when the requeue arrived; "
                "retry with a new request id",
                occurrence_id=occurrence_id,
                status=o["status"],
            )
        raise EvidenceConflict(
            f"occurrence {occurrence_id} failed with {actual_code!r}, not {expected_error_code!r}",
            occurrence_id=occurrence_id,
            expected_error_code=expected_error_code,
            actual_error_code=actual_code,
        )
    actual_code = (loads(revived.last_error) or {}).get("code")
    grant(tx, occurrence_id, request_id, revived.fence, actual_code)
    tx.emit(
        EventType.OCCURRENCE_REQUEUED,
        job_id=revived.job_id,
        occurrence_id=occurrence_id,
        fence=revived.fence,
        request_id=request_id,
        operator=operator,
        previous_error=actual_code,
    )
    return False


def cancel(tx: Tx, occurrence_id: int, *, request_id: str, operator: str) -> bool:
    """Cancel: at once when waiting; a running one is asked and its worker stops."""
    if record_request(tx, request_id, "cancel", str(occurrence_id), {}, operator):
        return True
    moved = request_cancel(tx, occurrence_id, reason=f"operator:{operator}")
    if moved == S.CANCELLED:
        cancelled_links(tx, occurrence_id)
    if moved is not None:
        return False
    o = occurrence_row(tx, occurrence_id)  # zero rows: read once for the precise answer
    if o["status"] != S.RUNNING:
        raise StateConflict(
            f"occurrence {occurrence_id} is {o['status']}; only queued, retry_wait, "
            "awaiting_approval or running occurrences can be cancelled",
            occurrence_id=occurrence_id,
            status=o["status"],
        )
    return False  # running and already asked to stop: this request joins that one
