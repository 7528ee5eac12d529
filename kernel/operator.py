"""Operator actions on occurrences: cancel, requeue; and request-id bookkeeping.

Each is idempotent by request id (SPEC I7): the first call records the request
and the evidence the caller gave; a replay answers ``deduplicated``. Evidence a
caller did not give (``None``) is not evidence: a replay without it is a
faithful replay. Explicitly given evidence that differs from the first call's is
refused. Pause and resume are in :mod:`kernel.pausing`.
"""

from __future__ import annotations

from typing import Any

from kernel import budgets
from kernel import statements as st
from kernel import transitions as T
from kernel.control import end_control
from kernel.errors import (
    EvidenceConflict,
    FenceConflict,
    InvalidArgument,
    NotFound,
    StateConflict,
)
from kernel.events import EventType
from kernel.records import dumps, loads
from kernel.states import OccurrenceStatus
from kernel.tx import Tx

__all__ = [
    "record_request",
    "occurrence_row",
    "control_row",
    "request_cancel",
    "requeue",
    "grant",
    "cancel",
]

S = OccurrenceStatus


def record_request(
    tx: Tx, request_id: str, action: str, target: str, evidence: dict[str, Any], operator: str
) -> bool:
    """Record an operator request; True when it is a faithful replay of an earlier one.

    Raises:
        EvidenceConflict: the request id was used for another action or target, or
            evidence given now (not None) differs from the first call's.
    """
    if not request_id or len(request_id) > 128:
        raise InvalidArgument("request_id", "must be 1 to 128 characters")
    params = {
        "request_id": request_id,
        "action": action,
        "target": target,
        "evidence": dumps(evidence),
        "operator": operator,
        "now": tx.now,
    }
    if tx.conn.execute(st.RECORD_REQUEST[tx.dialect], params).first() is not None:
        return False
    first = tx.conn.execute(st.REQUEST_BY_ID, {"request_id": request_id}).one()
    recorded = loads(first.evidence) or {}
    changed = {k: v for k, v in evidence.items() if v is not None and recorded.get(k) != v}
    if (first.action, first.target) != (action, target) or changed:
        raise EvidenceConflict(
            f"request id {request_id!r} was first used for {first.action} {first.target} "
            f"with {first.evidence}; use a new request id for a different action",
            request_id=request_id,
            **({"changed": sorted(changed)} if changed else {}),
        )
    return True


def occurrence_row(tx: Tx, occ_id: int) -> Any:
    row = tx.conn.execute(st.OCCURRENCE_BY_ID, {"occ_id": occ_id}).first()
    if row is None:
        raise NotFound(f"occurrence {occ_id} does not exist", occurrence_id=occ_id)
    return row._mapping


def control_row(tx: Tx, occ_id: int) -> Any:
    row = tx.conn.execute(st.CONTROL_BY_ID, {"occ_id": occ_id}).first()
    return row._mapping if row is not None else None


def request_cancel(tx: Tx, occ_id: int, *, reason: str) -> OccurrenceStatus | None:
    """Cancel at once if waiting; flag a running one for its worker. Returns the status
    this left (``cancelled``, or ``running`` when flagged); None: nothing to do (already
    asked, or it ended, perhaps just now)."""
    moved = T.run(tx, T.OPERATOR_CANCELS, {"occ_id": occ_id, "now": tx.now})
    if moved is None:
        return None
    if moved.status == S.CANCELLED:
        end_control(tx, occ_id, job_id=moved.job_id, fence=moved.fence)
    tx.emit(
        EventType.OCCURRENCE_CANCEL_REQUESTED
        if moved.status == S.RUNNING
        else EventType.OCCURRENCE_CANCELLED,
        job_id=moved.job_id,
        occurrence_id=occ_id,
        fence=moved.fence,
        reason=reason,
    )
    if moved.status == S.CANCELLED and moved.attempt == 0:
        budgets.release(tx, occ_id, job_id=moved.job_id)  # it never ran
    return S(moved.status)


def grant(tx: Tx, occ_id: int, request_id: str, fence: int, error_code: str | None) -> None:
    tx.conn.execute(
        st.GRANT[tx.dialect],
        {
            "request_id": request_id,
            "occ_id": occ_id,
            "fence": fence,
            "error_code": error_code or "",
            "now": tx.now,
        },
    )


def requeue(
    tx: Tx,
    occ_id: int,
    *,
    expected_fence: int | None,
    expected_error_code: str | None,
    request_id: str,
    operator: str,
) -> bool:
    """Give a dead letter one more claim, consuming no attempt, if the given evidence holds."""
    evidence = {"fence": expected_fence, "error_code": expected_error_code}
    if record_request(tx, request_id, "requeue", str(occ_id), evidence, operator):
        return True
    revived = T.run(
        tx,
        T.OPERATOR_REQUEUES,
        {
            "occ_id": occ_id,
            "expected_fence": expected_fence,
            "expected_error_code": expected_error_code,
            "now": tx.now,
        },
    )
    if revived is None:
        o = occurrence_row(tx, occ_id)
        actual_code = (loads(o["last_error"]) or {}).get("code")
        if o["status"] != S.DEAD_LETTER:
            raise StateConflict(
                f"occurrence {occ_id} is {o['status']}, not dead_letter",
                occurrence_id=occ_id,
                status=o["status"],
            )
        if expected_fence is not None and o["fence"] != expected_fence:
            raise FenceConflict(
                f"occurrence {occ_id} is at fence {o['fence']}, not {expected_fence}",
                occurrence_id=occ_id,
                expected_fence=expected_fence,
                actual_fence=o["fence"],
            )
        if expected_error_code is None or actual_code == expected_error_code:
            # The guard holds now but did not when REQUEUE ran: it became a dead
            # letter meanwhile (PostgreSQL READ COMMITTED). This request came first.
            raise StateConflict(
                f"occurrence {occ_id} was not yet a dead letter when the requeue arrived; "
                "retry with a new request id",
                occurrence_id=occ_id,
                status=o["status"],
            )
        raise EvidenceConflict(
            f"occurrence {occ_id} failed with {actual_code!r}, not {expected_error_code!r}",
            occurrence_id=occ_id,
            expected_error_code=expected_error_code,
            actual_error_code=actual_code,
        )
    actual_code = (loads(revived.last_error) or {}).get("code")
    grant(tx, occ_id, request_id, revived.fence, actual_code)
    tx.emit(
        EventType.OCCURRENCE_REQUEUED,
        job_id=revived.job_id,
        occurrence_id=occ_id,
        fence=revived.fence,
        request_id=request_id,
        operator=operator,
        previous_error=actual_code,
    )
    return False


def cancel(tx: Tx, occ_id: int, *, request_id: str, operator: str) -> bool:
    """Cancel: at once when waiting; a running one is asked and its worker stops."""
    if record_request(tx, request_id, "cancel", str(occ_id), {}, operator):
        return True
    if request_cancel(tx, occ_id, reason=f"operator:{operator}") is not None:
        return False
    o = occurrence_row(tx, occ_id)  # zero rows: read once for the precise answer
    if o["status"] != S.RUNNING:
        raise StateConflict(
            f"occurrence {occ_id} is {o['status']}; only queued, retry_wait, "
            "awaiting_approval or running occurrences can be cancelled",
            occurrence_id=occ_id,
            status=o["status"],
        )
    return False  # running and already asked to stop: this request joins that one
