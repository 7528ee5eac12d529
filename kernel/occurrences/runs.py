"""A holder's writes: renew, settle, release (pause ack, hand back).

A lease that expires is settled by kernel/occurrences/lease_expiry.py."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping
from typing import Any

from kernel import statements as st
from kernel.db.tx import Tx
from kernel.errors import (
    InvalidArgument,
    KernelError,
    LeaseLost,
    NotFound,
    PauseUnsupported,
    RevisionConflict,
    StateConflict,
)
from kernel.events import EventType, settled_event
from kernel.limits import budgets, pools
from kernel.occurrences import result_hooks
from kernel.occurrences.chains import fire_children
from kernel.occurrences.control import end_control
from kernel.records import MAX_CHECKPOINT_BYTES, checkpoint_envelope, dumps, loads, to_dt
from kernel.spec.retry import retry_decision
from kernel.states import ControlState, Effect, OccurrenceStatus
from kernel.transitions import occurrences as T
from kernel.types import PendingPause, RenewAnswer

__all__ = [
    "MAX_CHECKPOINT_BYTES",
    "renew",
    "settle",
    "owes_more",
    "succeed_plain_params",
    "release",
]

S = OccurrenceStatus


def lease_lost(tx: Tx, occurrence_id: int, owner: str, fence: int) -> LeaseLost | NotFound:
    row = tx.conn.execute(st.OCCURRENCE_BY_ID, {"occurrence_id": occurrence_id}).first()
    if row is None:
        return NotFound(f"occurrence {occurrence_id} does not exist", occurrence_id=occurrence_id)
    m = row._mapping
    return LeaseLost(
        f"occurrence {occurrence_id}: owner {owner!r} with fence {fence} no longer holds the lease "
        f"(status {m['status']}, fence {m['fence']}, owner {m['lease_owner']!r}); "
        "the result of this run must be discarded",
        occurrence_id=occurrence_id,
        fence=fence,
        current_fence=m["fence"],
        status=m["status"],
    )


def renew(
    tx: Tx, occurrence_id: int, owner: str, fence: int, lease_ms: int, checkpoint: Any = None
) -> RenewAnswer:
    """Extend a live lease; answer with any pause or cancel request pending.

    ``checkpoint``: the newest data the run gave at its ``adapter_checkpoint`` safe points
    since its last renewal, stored with the lease (fenced as the renewal is) as the
    occurrence's checkpoint, which the next claim hands over; None keeps the stored one.
    """
    stored = None if checkpoint is None else checkpoint_envelope("adapter_checkpoint", checkpoint)
    params = {
        "occurrence_id": occurrence_id,
        "owner": owner,
        "held_fence": fence,
        "now": tx.now,
        "lease_until": tx.now + lease_ms,
        "checkpoint": stored,
    }
    renewed = T.run(tx, T.WORKER_RENEWS, params)
    if renewed is None:
        raise lease_lost(tx, occurrence_id, owner, fence)
    control = tx.conn.execute(st.CONTROL_BY_ID, {"occurrence_id": occurrence_id}).first()
    pause = None
    if control is not None:
        c = control._mapping
        if c["state"] == ControlState.PAUSE_REQUESTED and c["expected_fence"] == fence:
            pause = PendingPause(
                c["pause_request_id"], c["revision"], tuple(loads(c["safe_points"]))
            )
    expires = to_dt(tx.now + lease_ms)
    assert expires is not None
    return RenewAnswer(
        lease_expires_at=expires, pause=pause, cancel_requested=bool(renewed.cancel_requested)
    )


def settle(
    tx: Tx,
    occurrence_id: int,
    owner: str,
    fence: int,
    *,
    outcome: str,
    result: Any = None,
    error: dict[str, Any] | None = None,
    retryable: bool = True,
    effect: Effect = Effect.NOT_APPLIED,
    rnd: random.Random | None = None,
    alone: bool = False,
    retry_in: float | None = None,
) -> OccurrenceStatus:
    """End the holder's run. ``outcome`` is succeeded, failed or cancelled.

    A success that owes nothing beyond its row and event is one statement
    (WORKER_SUCCEEDS_PLAIN); ``alone`` lets that statement be the whole transaction
    (the caller writes nothing after the settle).

    A failure goes to retry_wait (after ``retry_in`` seconds when the job code chose
    them, else the backoff of the snapshot's retry policy) while
    attempts remain and the error is retryable, else to dead_letter. For an
    at-most-once occurrence (its stored ``delivery``, read by SETTLE itself) a failure
    whose ``effect`` is unknown goes to needs_adjudication instead, and one whose effect
    is applied is not retried (dead_letter).
    """
    plain = outcome == "succeeded" and not owes_more(result)
    if plain and _succeed_plain(tx, occurrence_id, owner, fence, result, alone):
        return S.SUCCEEDED
    retry_delay_ms = 0
    failed_effect = Effect.NOT_APPLIED
    if outcome == "succeeded":
        to_status = S.SUCCEEDED
    elif outcome == "cancelled":
        to_status = S.CANCELLED
    elif outcome == "failed":
        if error is None or not error.get("code"):
            raise InvalidArgument("error", "a failure needs an error with a code")
        try:
            failed_effect = Effect(effect)
        except ValueError:
            raise InvalidArgument(
                "effect", f"must be one of {', '.join(Effect)}, not {effect!r}"
            ) from None
        row = tx.conn.execute(st.OCCURRENCE_BY_ID, {"occurrence_id": occurrence_id}).first()
        if row is None:
            raise NotFound(
                f"occurrence {occurrence_id} does not exist", occurrence_id=occurrence_id
            )
        m = row._mapping
        spec = loads(m["definition"])
        decision = retry_decision(
            spec["retry"],
            attempt=m["attempt"],
            max_attempts=m["max_attempts"],
            retryable=retryable,
            rnd=rnd,
        )
        # SETTLE turns a retry into a cancel when one is pending, and an at-most-once
        # run's unknown outcome into needs_adjudication (decided in the statement).
        to_status = S.RETRY_WAIT if decision.retry else S.DEAD_LETTER
        if to_status == S.RETRY_WAIT:
            delay_s = decision.delay_s if retry_in is None else max(0.0, retry_in)
            retry_delay_ms = int(delay_s * 1000)
    else:
        raise InvalidArgument("outcome", f"must be succeeded, failed or cancelled, not {outcome!r}")
    updated = T.run(
        tx,
        _SETTLES[outcome],
        {
            "occurrence_id": occurrence_id,
            "owner": owner,
            "held_fence": fence,
            "now": tx.now_param(),
            "to_status": to_status.value,
            "retry_delay_ms": retry_delay_ms,
            "effect": failed_effect.value,
            "result_json": dumps(result) if outcome == "succeeded" else None,
            "error_json": dumps(error) if error is not None else None,
        },
    )
    if updated is None:
        raise lease_lost(tx, occurrence_id, owner, fence)
    u = updated._mapping
    tx.observe_now(u["now"])
    pools.give_back(tx, u["pool"])
    to_status = S(u["status"])
    settled = {
        "attempt": u["attempt"],
        # The traceback stays on the occurrence's row: events are kept small.
        **({"error": _without_traceback(error)} if error is not None else {}),
        **({"retry_at": u["available_at"]} if to_status == S.RETRY_WAIT else {}),
        **({"reason": "unknown_outcome"} if to_status == S.NEEDS_ADJUDICATION else {}),
    }
    if tx.is_postgres:
        # ``control_open`` is read from SETTLE's snapshot: a pause request committed
        # while SETTLE waited for the row lock is not in it, so the control is ended
        # unconditionally, in the statement that also writes the events.
        T.run_count(
            tx,
            T.CONTROL_ENDS_WITH_SETTLE,
            {
                "occurrence_id": occurrence_id,
                "now": tx.now,
                "job_id": u["job_id"],
                "fence": fence,
                "type": settled_event(to_status).value,
                "data": dumps(settled),
            },
        )
    else:
        if u["control_open"]:
            end_control(tx, occurrence_id, job_id=u["job_id"], fence=fence)
        tx.emit(
            settled_event(to_status),
            job_id=u["job_id"],
            occurrence_id=occurrence_id,
            fence=fence,
            **settled,
        )
    if to_status == S.SUCCEEDED:
        budgets.settle_units(tx, occurrence_id, result)
        result_hooks.after_success(tx, occurrence_id, u["job_id"], fence, result)
    if to_status in (S.SUCCEEDED, S.DEAD_LETTER) and u["has_children"]:
        fire_children(
            tx,
            parent_id=occurrence_id,
            parent_job=u["job_id"],
            succeeded=to_status == S.SUCCEEDED,
            result=result,
            error=error,
            parent_depth=u["chain_depth"],
        )
    return to_status


def _without_traceback(error: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in error.items() if key != "traceback"}


def owes_more(result: Any) -> bool:
    """A success whose result the kernel acts on beyond the settle: budget units it
    reports, or a registered kind's result hook."""
    return isinstance(result, Mapping) and (
        budgets.REPORTED_UNITS_KEY in result or result_hooks.wanted(result)
    )


def succeed_plain_params(
    tx: Tx, occurrence_id: int, owner: str, fence: int, result: Any
) -> dict[str, Any]:
    """The parameters of WORKER_SUCCEEDS_PLAIN's statement (and of a batch's one)."""
    return {
        "occurrence_id": occurrence_id,
        "owner": owner,
        "held_fence": fence,
        "now": tx.now_param(),
        "result_json": dumps(result),
        "error_json": None,
    }


def _succeed_plain(
    tx: Tx, occurrence_id: int, owner: str, fence: int, result: Any, alone: bool
) -> bool:
    """WORKER_SUCCEEDS_PLAIN; False (nothing written) when its guard held for no row,
    a lost lease included: SETTLE then decides, and says which."""
    params = succeed_plain_params(tx, occurrence_id, owner, fence, result)
    settled = T.run(tx, T.WORKER_SUCCEEDS_PLAIN, params, alone=alone)
    if settled is None:
        return False
    tx.observe_now(settled.now)
    if not tx.is_postgres:  # PostgreSQL wrote it in the statement
        tx.emit(
            EventType.OCCURRENCE_SUCCEEDED,
            job_id=settled.job_id,
            occurrence_id=occurrence_id,
            fence=fence,
            attempt=settled.attempt,
        )
    return True


#: The SETTLE row of each outcome a holder reports.
_SETTLES = {
    "succeeded": T.WORKER_SUCCEEDS,
    "failed": T.WORKER_FAILS,
    "cancelled": T.WORKER_STOPS_ON_CANCEL,
}


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
        if tx.is_postgres:
            st.LOCK_OCCURRENCE.first(tx.conn, {"occurrence_id": occurrence_id})
        acked = T.run(
            tx,
            T.WORKER_ACKS_PAUSE,
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
                tx, occurrence_id, owner, fence, pause_request_id, expected_revision, safe_point
            )
    released = T.run(
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
        tx.emit(
            EventType.OCCURRENCE_CANCELLED,
            job_id=released.job_id,
            occurrence_id=occurrence_id,
            fence=fence,
            attempt=released.attempt,
            error={"code": "CANCELLED", "message": "cancelled at a safe point"},
        )
        return
    if pause_request_id is None:
        handed = T.run(
            tx,
            T.WORKER_RELEASES_CONTROL,
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
