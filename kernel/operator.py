"""Operator actions: pause, resume, requeue, adjudicate, cancel.

Each is idempotent by request id (I7): the first call records the request and
the evidence it was made on; a replay with the same evidence answers
``deduplicated``; a replay with other evidence is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from kernel import statements as st
from kernel.control import end_control
from kernel.errors import (
    EvidenceConflict,
    FenceConflict,
    InvalidArgument,
    LeaseLost,
    NotFound,
    PauseUnsupported,
    RevisionConflict,
    StateConflict,
)
from kernel.events import EventType
from kernel.records import dumps, loads
from kernel.schema import controls, occurrences, operator_requests, requeue_grants
from kernel.states import ControlState, Decision, OccurrenceStatus, SafePoint
from kernel.tx import Tx

__all__ = [
    "record_request",
    "request_cancel",
    "request_pause",
    "resume",
    "requeue",
    "adjudicate",
    "cancel",
]

S = OccurrenceStatus
_SAFE_POINTS = {p.value for p in SafePoint}


def record_request(
    tx: Tx, request_id: str, action: str, target: str, evidence: dict[str, Any], operator: str
) -> bool:
    """Record an operator request; True when it is a faithful replay of an earlier one.

    Raises:
        EvidenceConflict: the request id was used for another action, target or evidence.
    """
    if not request_id or len(request_id) > 128:
        raise InvalidArgument("request_id", "must be 1 to 128 characters")
    encoded = dumps(evidence)
    row = tx.conn.execute(
        sa.select(operator_requests).where(operator_requests.c.request_id == request_id)
    ).first()
    if row is not None:
        if (row.action, row.target, row.evidence) != (action, target, encoded):
            raise EvidenceConflict(
                f"request id {request_id!r} was first used for {row.action} {row.target} "
                f"with {row.evidence}; use a new request id for a different action",
                request_id=request_id,
            )
        return True
    tx.conn.execute(
        sa.insert(operator_requests),
        {
            "request_id": request_id,
            "action": action,
            "target": target,
            "evidence": encoded,
            "operator": operator,
            "created_at": tx.now,
        },
    )
    return False


def _occurrence(tx: Tx, occ_id: int) -> Any:
    row = tx.conn.execute(st.OCCURRENCE_BY_ID, {"occ_id": occ_id}).first()
    if row is None:
        raise NotFound(f"occurrence {occ_id} does not exist", occurrence_id=occ_id)
    return row._mapping


def _control(tx: Tx, occ_id: int) -> Any:
    row = tx.conn.execute(st.CONTROL_BY_ID, {"occ_id": occ_id}).first()
    return row._mapping if row is not None else None


def request_cancel(tx: Tx, occ_id: int, *, reason: str) -> bool:
    """Cancel at once if waiting; flag a running one for its worker. False: nothing to do."""
    moved = tx.conn.execute(st.CANCEL, {"occ_id": occ_id, "now": tx.now}).first()
    if moved is None:
        return False
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
    return True


def request_pause(
    tx: Tx,
    occ_id: int,
    *,
    expected_fence: int,
    request_id: str,
    safe_points: Sequence[str],
    operator: str,
) -> bool:
    """Ask the running holder to pause at its next safe point. Returns ``deduplicated``.

    Needs the occurrence running under ``expected_fence`` with a live lease and an
    adapter that declared safe points (``safe_points``, from the adapter registry).
    """
    unknown = set(safe_points) - _SAFE_POINTS
    if unknown:
        raise InvalidArgument("safe_points", f"unknown safe points {sorted(unknown)}")
    if record_request(tx, request_id, "pause", str(occ_id), {"fence": expected_fence}, operator):
        return True
    o = _occurrence(tx, occ_id)
    if not safe_points:
        raise PauseUnsupported(
            f"occurrence {occ_id} runs a {loads(o['definition'])['kind']!r} adapter, which "
            "declares no safe point; it cannot be paused (cancel it instead)",
            occurrence_id=occ_id,
        )
    c = _control(tx, occ_id)
    if c is not None and c["state"] != ControlState.TERMINAL and c["state"] != ControlState.RESUMED:
        raise StateConflict(
            f"occurrence {occ_id} already has a {c['state']} control",
            occurrence_id=occ_id,
            state=c["state"],
            revision=c["revision"],
        )
    if o["status"] != S.RUNNING:
        raise StateConflict(
            f"occurrence {occ_id} is {o['status']}, not running; only a running "
            "occurrence can be paused",
            occurrence_id=occ_id,
            status=o["status"],
        )
    if o["fence"] != expected_fence:
        raise FenceConflict(
            f"occurrence {occ_id} is at fence {o['fence']}, not {expected_fence}: "
            "it was claimed again since you looked",
            occurrence_id=occ_id,
            expected_fence=expected_fence,
            actual_fence=o["fence"],
        )
    if o["lease_expires_at"] <= tx.now:
        raise LeaseLost(
            f"occurrence {occ_id}: its lease has expired; the holder is gone", occurrence_id=occ_id
        )
    values = {
        "state": ControlState.PAUSE_REQUESTED.value,
        "expected_fence": expected_fence,
        "pause_request_id": request_id,
        "resume_request_id": None,
        "safe_points": dumps(sorted(safe_points)),
        "requested_at": tx.now,
        "paused_at": None,
        "resumed_at": None,
        "terminal_at": None,
        "updated_at": tx.now,
    }
    if c is None:
        tx.conn.execute(sa.insert(controls), {"occurrence_id": occ_id, "revision": 1, **values})
    else:
        changed = tx.conn.execute(
            sa.update(controls)
            .where(controls.c.occurrence_id == occ_id, controls.c.revision == c["revision"])
            .values(revision=controls.c.revision + 1, **values)
        ).rowcount
        if changed != 1:  # another request moved the control since it was read (PostgreSQL)
            raise RevisionConflict(
                f"occurrence {occ_id}: control changed during the pause request",
                occurrence_id=occ_id,
            )
    tx.emit(
        EventType.OCCURRENCE_PAUSE_REQUESTED,
        job_id=o["job_id"],
        occurrence_id=occ_id,
        fence=expected_fence,
        request_id=request_id,
        operator=operator,
    )
    return False


def resume(
    tx: Tx, occ_id: int, *, request_id: str, expected_revision: int | None, operator: str
) -> bool:
    """Make a paused occurrence claimable; the next claim resumes from its checkpoint."""
    if record_request(
        tx, request_id, "resume", str(occ_id), {"revision": expected_revision}, operator
    ):
        return True
    o = _occurrence(tx, occ_id)
    c = _control(tx, occ_id)
    if c is None or c["state"] != ControlState.PAUSED:
        raise StateConflict(
            f"occurrence {occ_id} is not paused",
            occurrence_id=occ_id,
            state=c["state"] if c else None,
        )
    if expected_revision is not None and c["revision"] != expected_revision:
        raise RevisionConflict(
            f"occurrence {occ_id}: control revision is {c['revision']}, not {expected_revision}",
            occurrence_id=occ_id,
            expected_revision=expected_revision,
            actual_revision=c["revision"],
        )
    changed = tx.conn.execute(
        sa.update(controls)
        .where(
            controls.c.occurrence_id == occ_id,
            controls.c.state == "paused",
            controls.c.revision == c["revision"],
        )
        .values(
            state="resumed",
            revision=controls.c.revision + 1,
            resume_request_id=request_id,
            resumed_at=tx.now,
            updated_at=tx.now,
        )
    ).rowcount
    if changed != 1:
        raise RevisionConflict(
            f"occurrence {occ_id}: control changed during resume", occurrence_id=occ_id
        )
    tx.conn.execute(
        sa.update(occurrences)
        .where(occurrences.c.id == occ_id, occurrences.c.status == S.RETRY_WAIT)
        .values(available_at=tx.now, dispatched_at=None, updated_at=tx.now)
    )
    tx.emit(
        EventType.OCCURRENCE_RESUMED,
        job_id=o["job_id"],
        occurrence_id=occ_id,
        fence=o["fence"],
        request_id=request_id,
        operator=operator,
    )
    return False


def requeue(
    tx: Tx,
    occ_id: int,
    *,
    expected_fence: int,
    expected_error_code: str,
    request_id: str,
    operator: str,
) -> bool:
    """Give a dead letter one more claim, consuming no attempt, if the evidence still holds."""
    evidence = {"fence": expected_fence, "error_code": expected_error_code}
    if record_request(tx, request_id, "requeue", str(occ_id), evidence, operator):
        return True
    o = _occurrence(tx, occ_id)
    actual_code = (loads(o["last_error"]) or {}).get("code")
    if o["status"] != S.DEAD_LETTER:
        raise StateConflict(
            f"occurrence {occ_id} is {o['status']}, not dead_letter",
            occurrence_id=occ_id,
            status=o["status"],
        )
    if o["fence"] != expected_fence:
        raise FenceConflict(
            f"occurrence {occ_id} is at fence {o['fence']}, not {expected_fence}",
            occurrence_id=occ_id,
            expected_fence=expected_fence,
            actual_fence=o["fence"],
        )
    if actual_code != expected_error_code:
        raise EvidenceConflict(
            f"occurrence {occ_id} failed with {actual_code!r}, not {expected_error_code!r}",
            occurrence_id=occ_id,
            expected_error_code=expected_error_code,
            actual_error_code=actual_code,
        )
    changed = tx.conn.execute(
        sa.update(occurrences)
        .where(
            occurrences.c.id == occ_id,
            occurrences.c.status == S.DEAD_LETTER,
            occurrences.c.fence == expected_fence,
        )
        # The operator revives it: a cancel request of the dead run is spent (no claim takes it).
        .values(
            status=S.RETRY_WAIT,
            available_at=tx.now,
            dispatched_at=None,
            settled_at=None,
            updated_at=tx.now,
            cancel_requested=False,
        )
    ).rowcount
    if changed != 1:
        raise FenceConflict(f"occurrence {occ_id} changed during requeue", occurrence_id=occ_id)
    tx.conn.execute(
        sa.insert(requeue_grants),
        {
            "request_id": request_id,
            "occurrence_id": occ_id,
            "expected_fence": expected_fence,
            "expected_error_code": expected_error_code,
            "created_at": tx.now,
            "claimed_at": None,
        },
    )
    tx.emit(
        EventType.OCCURRENCE_REQUEUED,
        job_id=o["job_id"],
        occurrence_id=occ_id,
        fence=expected_fence,
        request_id=request_id,
        operator=operator,
        previous_error=actual_code,
    )
    return False


def adjudicate(tx: Tx, occ_id: int, *, decision: str, request_id: str, operator: str) -> bool:
    """Decide an at-most-once occurrence whose outcome is unknown (I6)."""
    try:
        verdict = Decision(decision)
    except ValueError:
        raise InvalidArgument("decision", "must be applied, not_applied or abandon") from None
    if record_request(
        tx, request_id, "adjudicate", str(occ_id), {"decision": verdict.value}, operator
    ):
        return True
    o = _occurrence(tx, occ_id)
    if o["status"] != S.NEEDS_ADJUDICATION:
        raise StateConflict(
            f"occurrence {occ_id} is {o['status']}, not needs_adjudication",
            occurrence_id=occ_id,
            status=o["status"],
        )
    to_status, settled, error, grant = {
        Decision.APPLIED: (S.SUCCEEDED, True, None, False),
        # The uncertain run used an attempt; the operator's word earns it back.
        Decision.NOT_APPLIED: (S.RETRY_WAIT, False, None, True),
        Decision.ABANDON: (
            S.DEAD_LETTER,
            True,
            {"code": "ABANDONED", "message": f"abandoned by {operator}"},
            False,
        ),
    }[verdict]
    values: dict[str, Any] = {
        "status": to_status,
        "updated_at": tx.now,
        "available_at": tx.now,
        "dispatched_at": None,
        "settled_at": tx.now if settled else None,
    }
    if error is not None:
        values["last_error"] = dumps(error)
    changed = tx.conn.execute(
        sa.update(occurrences)
        .where(
            occurrences.c.id == occ_id,
            occurrences.c.status == S.NEEDS_ADJUDICATION,
            occurrences.c.fence == o["fence"],
        )
        .values(**values)
    ).rowcount
    if changed != 1:
        raise StateConflict(
            f"occurrence {occ_id} changed during adjudication", occurrence_id=occ_id
        )
    if grant:
        tx.conn.execute(
            sa.insert(requeue_grants),
            {
                "request_id": request_id,
                "occurrence_id": occ_id,
                "expected_fence": o["fence"],
                "expected_error_code": "LEASE_EXPIRED",
                "created_at": tx.now,
                "claimed_at": None,
            },
        )
    if settled:
        end_control(tx, occ_id, job_id=o["job_id"], fence=o["fence"])
    tx.emit(
        EventType.OCCURRENCE_ADJUDICATED,
        job_id=o["job_id"],
        occurrence_id=occ_id,
        fence=o["fence"],
        decision=verdict.value,
        request_id=request_id,
        operator=operator,
        status=to_status.value,
    )
    return False


def cancel(tx: Tx, occ_id: int, *, request_id: str, operator: str) -> bool:
    """Cancel: at once when waiting; a running one is asked and its worker stops."""
    if record_request(tx, request_id, "cancel", str(occ_id), {}, operator):
        return True
    if request_cancel(tx, occ_id, reason=f"operator:{operator}"):
        return False
    o = _occurrence(tx, occ_id)  # zero rows: read once for the precise answer
    if o["status"] != S.RUNNING:
        raise StateConflict(
            f"occurrence {occ_id} is {o['status']}; only queued, retry_wait or running "
            "occurrences can be cancelled",
            occurrence_id=occ_id,
            status=o["status"],
        )
    return False  # running and already asked to stop: this request joins that one
