"""A holder's release at a safe point: the acknowledgement of a pause, or a warm hand back.

Both store the run's checkpoint and give its pool slot back; a pending cancel wins.
"""

from __future__ import annotations

import hashlib
from typing import Any

from kernel import statements as st
from kernel.errors import (
    KernelError,
    PauseUnsupported,
    RevisionConflict,
    StateConflict,
)
from kernel.events import EventType
from kernel.limits import pools
from kernel.occurrences.chains import cancelled_links
from kernel.occurrences.control import end_control
from kernel.occurrences.runs import lease_lost
from kernel.records import checkpoint_envelope, dumps
from kernel.states import ControlState, OccurrenceStatus
from kernel.transaction.tx import Tx
from kernel.transitions import controls as TC
from kernel.transitions import door, notices
from kernel.transitions import occurrences as T

__all__ = ["release"]

S = OccurrenceStatus


def release(
    tx: Tx,
    occurrence_id: int,
    owner: str,
    fence: int,
    *,
    safe_point: str,
    checkpoint: Any,
    pause_request_id: str | None,
    expected_revision: int | None,
) -> None:
    """Hand a running occurrence back at a safe point, storing its checkpoint.

    With ``pause_request_id`` this acknowledges that pause: the control becomes
    ``paused`` and only a resume makes it claimable. Without, it is a warm
    shutdown: the control becomes ``resumed`` so any worker picks it up at once
    from the checkpoint, consuming no attempt (``paused`` instead when a pause of
    this run is pending). A pending cancel request makes it ``cancelled``.
    """
    stored = checkpoint_envelope(safe_point, checkpoint)
    params = {"held_fence": fence, "now": tx.now, "checkpoint": stored}
    if pause_request_id is not None:
        _ack_pause(
            tx, params, occurrence_id, owner, pause_request_id, expected_revision, safe_point
        )
    released = door.run(
        tx,
        T.WORKER_RELEASES,
        {
            "occurrence_id": occurrence_id,
            "owner": owner,
            "held_fence": fence,
            "now": tx.now,
            "cancel_error": dumps({"code": "CANCELLED", "message": "cancelled at a safe point"}),
            "checkpoint": stored,
        },
    )
    if released is None:
        raise lease_lost(tx, occurrence_id, owner, fence)
    pools.give_back(tx, released.pool)
    if released.status == S.CANCELLED:
        # A pending cancel wins (decided by RELEASE): a handed-back cancel-requested
        # row would wait for ever, since no claim takes it.
        end_control(tx, occurrence_id, job_id=released.job_id, fence=fence)
        cancelled_links(tx, occurrence_id)
        tx.emit(
            EventType.OCCURRENCE_CANCELLED,
            job_id=released.job_id,
            occurrence_id=occurrence_id,
            fence=fence,
            attempt=released.attempt,
            error={"code": "CANCELLED", "message": "cancelled at a safe point"},
        )
        notices.owe_result(tx, occurrence_id, fence, S.CANCELLED)
        return
    if pause_request_id is None:
        handed = door.run(
            tx,
            TC.WORKER_RELEASES_CONTROL,
            {**params, "occurrence_id": occurrence_id, "safe_points": dumps([safe_point])},
        )
        assert handed is not None  # an upsert always returns its row
        if handed.state == ControlState.PAUSED:
            # A warm hand back while this run's pause is pending honours the pause.
            pause_request_id = handed.pause_request_id
    tx.emit(
        EventType.OCCURRENCE_PAUSED if pause_request_id else EventType.OCCURRENCE_HANDED_BACK,
        job_id=released.job_id,
        occurrence_id=occurrence_id,
        fence=fence,
        safe_point=safe_point,
        checkpoint_digest=hashlib.sha256(stored.encode()).hexdigest(),
        **({"request_id": pause_request_id} if pause_request_id else {}),
    )


def _ack_refused(
    tx: Tx,
    occurrence_id: int,
    owner: str,
    fence: int,
    pause_request_id: str,
    expected_revision: int | None,
    safe_point: str,
) -> KernelError:
    """Why ACK_PAUSE changed nothing, read once after the fact."""
    control = tx.conn.execute(st.CONTROL_BY_ID, {"occurrence_id": occurrence_id}).first()
    c = control._mapping if control is not None else None
    if (
        c is None
        or c["state"] != ControlState.PAUSE_REQUESTED
        or c["pause_request_id"] != pause_request_id
    ):
        return StateConflict(
            f"occurrence {occurrence_id}: pause request {pause_request_id!r} is no longer pending",
            occurrence_id=occurrence_id,
            state=c["state"] if c else None,
        )
    if expected_revision is not None and c["revision"] != expected_revision:
        return RevisionConflict(
            f"occurrence {occurrence_id}: control revision is {c['revision']}, "
            f"not {expected_revision}",
            occurrence_id=occurrence_id,
            expected_revision=expected_revision,
            actual_revision=c["revision"],
        )
    if c["expected_fence"] != fence:
        return lease_lost(tx, occurrence_id, owner, fence)
    return PauseUnsupported(
        f"occurrence {occurrence_id}: the adapter did not declare {safe_point!r} a safe point",
        occurrence_id=occurrence_id,
        safe_point=safe_point,
    )


def _ack_pause(
    tx: Tx,
    params: dict[str, Any],
    occurrence_id: int,
    owner: str,
    pause_request_id: str,
    expected_revision: int | None,
    safe_point: str,
) -> None:
    """WORKER_ACKS_PAUSE, first: the control becomes ``paused`` before RELEASE hands the
    run back (the occurrence's lock taken first on PostgreSQL, as every writer does)."""
    tx.lock(st.LOCK_OCCURRENCE, {"occurrence_id": occurrence_id})
    acked = door.run(
        tx,
        TC.WORKER_ACKS_PAUSE,
        {
            **params,
            "of_occurrence": occurrence_id,
            "request_id": pause_request_id,
            "expected_revision": expected_revision,
            "quoted_safe_point": dumps(safe_point),
        },
    )
    if acked is None:
        raise _ack_refused(
            tx,
            occurrence_id,
            owner,
            params["held_fence"],
            pause_request_id,
            expected_revision,
            safe_point,
        )
