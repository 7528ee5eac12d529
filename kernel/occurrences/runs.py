"""A holder's writes: renew and settle (a release at a safe point: kernel/occurrences/releases.py).

A settle is read, a pure decision (:func:`decide`) and SETTLE's guarded write. A lease that
expires is settled by kernel/occurrences/lease_expiry.py."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernel import statements as st
from kernel.errors import (
    InvalidArgument,
    LeaseLost,
    NotFound,
)
from kernel.events import settled_event
from kernel.limits import budgets, pools
from kernel.occurrences.chains import fire_children, fire_links
from kernel.occurrences.control import end_control
from kernel.records import checkpoint_envelope, dumps, loads, to_dt
from kernel.spec.retry import retry_decision
from kernel.spec.task_runs import retried_definition
from kernel.states import ControlState, Effect, OccurrenceStatus
from kernel.transaction.tx import Tx
from kernel.transitions import controls as TC
from kernel.transitions import door, fast_lane, notices
from kernel.transitions import occurrences as T
from kernel.types import PendingPause, RenewAnswer

__all__ = [
    "SettleDecision",
    "decide",
    "lease_lost",
    "renew",
    "settle",
    "owes_more",
    "succeed_plain_params",
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
    renewed = door.run(tx, T.WORKER_RENEWS, params)
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


@dataclass(frozen=True, slots=True)
class SettleDecision:
    """The state SETTLE is asked to write (:func:`decide`; SETTLE itself may still turn a
    retry into a cancel, or an at-most-once run's unknown outcome into needs_adjudication)."""

    to_status: OccurrenceStatus
    retry_delay_ms: int = 0
    effect: Effect = Effect.NOT_APPLIED


def decide(
    outcome: str,
    row: Mapping[Any, Any] | None,
    *,
    effect: Effect,
    retryable: bool,
    retry_in: float | None,
    rnd: random.Random | None,
) -> SettleDecision:
    """What a holder's ``outcome`` settles to. ``row`` (a failure's only): the occurrence
    as read, whose snapshot's retry policy and attempts decide retry_wait or dead_letter
    (:func:`kernel.spec.retry.retry_decision`). Pure."""
    if outcome != "failed":
        return SettleDecision(S.SUCCEEDED if outcome == "succeeded" else S.CANCELLED)
    assert row is not None
    decision = retry_decision(
        loads(row["definition"])["retry"],
        attempt=row["attempt"],
        max_attempts=row["max_attempts"],
        retryable=retryable,
        rnd=rnd,
    )
    if not decision.retry:
        return SettleDecision(S.DEAD_LETTER, effect=effect)
    delay_s = decision.delay_s if retry_in is None else max(0.0, retry_in)
    return SettleDecision(S.RETRY_WAIT, int(delay_s * 1000), effect)


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
    retry_with: Mapping[str, Any] | None = None,
    replaced: bool = False,
) -> OccurrenceStatus:
    """End the holder's run. ``outcome`` is succeeded, failed or cancelled.

    A success that owes nothing beyond its row and event is one statement
    (WORKER_SUCCEEDS_PLAIN); ``alone`` lets that statement be the whole transaction
    (the caller writes nothing after the settle).

    A failure goes to retry_wait (after ``retry_in`` seconds when the job code chose
    them, else the backoff of the snapshot's retry policy) while
    attempts remain and the error is retryable, else to dead_letter. A retry runs with
    the arguments ``retry_with`` (``{"args", "kwargs"}``) when a task's code gave new ones. For an
    at-most-once occurrence (its stored ``delivery``, read by SETTLE itself) a failure
    whose ``effect`` is unknown goes to needs_adjudication instead, and one whose effect
    is applied is not retried (dead_letter).

    ``replaced``: the run succeeded by replacing itself (kernel/jobs/replacement.py): its
    links are not fired, its replacement takes them over.
    """
    plain = outcome == "succeeded" and not owes_more(result) and not replaced
    params = succeed_plain_params(tx, occurrence_id, owner, fence, result) if plain else None
    if params is not None and fast_lane.succeed_plain(tx, params, alone=alone):
        return S.SUCCEEDED
    failed_effect = _checked(outcome, error, effect)
    row = _read_failed(tx, occurrence_id) if outcome == "failed" else None
    # Read from the row this holder's fence guards: no other writer changes a definition.
    definition = (
        None
        if row is None or retry_with is None
        else retried_definition(row["definition"], retry_with)
    )
    decided = decide(
        outcome, row, effect=failed_effect, retryable=retryable, retry_in=retry_in, rnd=rnd
    )
    updated = door.run(
        tx,
        _SETTLES[outcome],
        {
            "occurrence_id": occurrence_id,
            "owner": owner,
            "held_fence": fence,
            "now": tx.now_param(),
            "to_status": decided.to_status.value,
            "retry_delay_ms": decided.retry_delay_ms,
            "effect": decided.effect.value,
            "result_json": dumps(result) if outcome == "succeeded" else None,
            "error_json": dumps(error) if error is not None else None,
            "definition_json": definition,
        },
    )
    if updated is None:
        raise lease_lost(tx, occurrence_id, owner, fence)
    links = None if replaced else updated._mapping["links"]
    return _settled(tx, occurrence_id, updated._mapping, fence, result, error, links)


def _checked(outcome: str, error: dict[str, Any] | None, effect: Effect | str) -> Effect:
    """The failed run's effect; refuses an unknown outcome, a failure without an error
    code and an unknown effect, naming each."""
    if outcome not in _SETTLES:
        raise InvalidArgument("outcome", f"must be succeeded, failed or cancelled, not {outcome!r}")
    if outcome != "failed":
        return Effect.NOT_APPLIED
    if error is None or not error.get("code"):
        raise InvalidArgument("error", "a failure needs an error with a code")
    try:
        return Effect(effect)
    except ValueError:
        raise InvalidArgument(
            "effect", f"must be one of {', '.join(Effect)}, not {effect!r}"
        ) from None


def _read_failed(tx: Tx, occurrence_id: int) -> Mapping[Any, Any]:
    """The occurrence a failure is decided from (its snapshot's retry policy, attempts)."""
    row = tx.conn.execute(st.OCCURRENCE_BY_ID, {"occurrence_id": occurrence_id}).first()
    if row is None:
        raise NotFound(f"occurrence {occurrence_id} does not exist", occurrence_id=occurrence_id)
    return row._mapping


def _settled(
    tx: Tx,
    occurrence_id: int,
    u: Mapping[Any, Any],
    fence: int,
    result: Any,
    error: dict[str, Any] | None,
    links: str | None,
) -> OccurrenceStatus:
    """What follows SETTLE's row ``u`` in its transaction: the pool slot given back, the
    control ended and the event, reported budget units, the job's notification,
    chained children, the ``links`` made."""
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
        door.run_count(
            tx,
            TC.CONTROL_ENDS_WITH_SETTLE,
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
    notices.notify(tx, occurrence_id, fence, to_status)
    if to_status == S.CANCELLED:  # the body stopped on the cancel and answered nothing
        notices.owe_result(tx, occurrence_id, fence, to_status)
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
    if to_status in (S.SUCCEEDED, S.DEAD_LETTER, S.CANCELLED):
        fire_links(
            tx,
            parent_id=occurrence_id,
            links=links,
            trigger_key=u["trigger_key"],
            succeeded=to_status == S.SUCCEEDED,
            result=result,
            revoked="cancelled" if to_status == S.CANCELLED else None,
        )
    return to_status


def _without_traceback(error: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in error.items() if key != "traceback"}


def owes_more(result: Any) -> bool:
    """A success whose result the settle acts on beyond its row and event: budget units
    it reports. (A watchdog's report is the facade's, after the settle: same transaction.)"""
    # None (most results) is no Mapping: said without the ABC's check.
    return (
        result is not None and isinstance(result, Mapping) and budgets.REPORTED_UNITS_KEY in result
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


#: The SETTLE row of each outcome a holder reports.
_SETTLES = {
    "succeeded": T.WORKER_SUCCEEDS,
    "failed": T.WORKER_FAILS,
    "cancelled": T.WORKER_STOPS_ON_CANCEL,
}
