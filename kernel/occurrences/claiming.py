"""Claims: a worker takes a claimable occurrence under a new fence (fence + 1)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from kernel import statements as st
from kernel.db.schema import occurrences
from kernel.db.translate import constraint_name
from kernel.events import EventType
from kernel.limits import held as limits
from kernel.occurrences import lease_expiry, runs
from kernel.records import dumps, loads, occurrence_from_row
from kernel.statements.predicates import claimable_now, lease_expired, start_expired
from kernel.states import ControlState, OccurrenceStatus
from kernel.transaction.tx import Tx
from kernel.transitions import controls as TC
from kernel.transitions import door, fast_lane
from kernel.transitions import occurrences as T
from kernel.types import Claim

__all__ = ["EXCLUSIVE_INDEX", "ClaimDecision", "claim", "claim_next", "decide", "succeed_and_claim"]

#: The partial unique index that lets one exclusive occurrence of a job run (schema.py).
EXCLUSIVE_INDEX = "occurrences_one_running_exclusive"
S = OccurrenceStatus


@dataclass(frozen=True, slots=True)
class ClaimDecision:
    """What a claim does with the row it read (:func:`decide`): take it (``take``), settle
    its expired lease (``expire``), or leave it (neither)."""

    take: bool = False
    expire: bool = False
    #: A reclaim of an expired run (it takes no new pool slot).
    reclaiming: bool = False
    #: It resumes a handed-back or resumed run from its checkpoint, as the same attempt.
    resuming: bool = False
    #: No attempt spent: resuming, an operator's requeue grant, or a reclaim.
    free: bool = False
    #: Another run of the job may hold it back (BLOCKING_IN_JOB, read before the write).
    ask_job: bool = False


def decide(o: Mapping[Any, Any], control: sa.Row[Any] | None, grant: str | None) -> ClaimDecision:
    """The claim of the occurrence row ``o`` (OCCURRENCE_FOR_CLAIM: its ``lease_expired``,
    ``attempts_left`` and ``lost_leases_left`` decided by the statements' predicates),
    its control row and an unused requeue grant for its fence. Pure: the guarded write
    decides again."""
    state = o["control_state"]
    if o["lease_expired"] and lease_expiry.ends_run(o):
        # Settled here as Beat's expiry would: with no Beat running, nothing stays running.
        return ClaimDecision(expire=True)
    if state == ControlState.PAUSED or o["cancel_requested"]:
        return ClaimDecision()
    reclaiming = o["status"] == S.RUNNING
    resuming = _resumes(o, control)
    # A reclaim spends no attempt: its worker was lost, the task did not fail (CLAIM
    # counts a lost lease instead, within the run's bound).
    free = resuming or grant is not None or reclaiming
    if not free and not o["attempts_left"]:
        return ClaimDecision()
    return ClaimDecision(
        take=True,
        reclaiming=reclaiming,
        resuming=resuming,
        free=free,
        ask_job=bool(o["exclusive"]) or o["delivery"] == "at-most-once",
    )


def _resumes(o: Mapping[Any, Any], control: sa.Row[Any] | None) -> bool:
    """Running under a resumed control means this run was claimed from it: a reclaim of
    it resumes from the same checkpoint, as the same attempt."""
    return o["control_state"] == ControlState.RESUMED and (
        o["status"] == S.RUNNING or (control is not None and control.expected_fence == o["fence"])
    )


def claim(
    tx: Tx, occurrence_id: int, owner: str, lease_ms: int | None, *, again: bool = True
) -> Claim | None:
    """Take ``occurrence_id`` if it is claimable now; None (no change) when it is not.

    Fence + 1. The attempt counts unless this claim resumes a handed-back or
    paused-and-resumed occurrence at the fence it was released on, reclaims a run
    whose lease expired (a lost lease: counted against ``max_lost_leases``), or uses
    an operator's requeue grant.

    A queued occurrence that never held a lease, with nothing else to decide (no control,
    pool, exclusivity or unknown outcome to look at), is claimed by one statement with no
    read before it; every other one is read (:func:`_read`), skipped when past its start
    deadline, else decided (:func:`decide`) and written (:func:`_take`)."""
    if again:
        queued = fast_lane.claim_queued(tx, occurrence_id, owner, lease_ms)
        if queued is not None:
            return queued
    read = _read(tx, occurrence_id)
    if read is None:
        return None
    o, control, grant = read
    if o["deadline_passed"]:  # never started late: settled as Beat's upkeep would
        lease_expiry.skip_expired(tx, occurrence_id=occurrence_id)
        return None
    decision = decide(o, control, grant)
    if decision.expire:
        lease_expiry.expire(tx, o)
    if not decision.take or (decision.ask_job and _job_blocks(tx, o)):
        return None
    return _take(tx, o, control, grant, decision, owner, lease_ms, again)


def _read(
    tx: Tx, occurrence_id: int
) -> tuple[Mapping[Any, Any], sa.Row[Any] | None, str | None] | None:
    """What a claim decides from: the row (locked on PostgreSQL), its control and, for a
    run waiting to retry that does not resume, an unused requeue grant for its fence."""
    row = st.OCCURRENCE_FOR_CLAIM.first(
        tx.conn, {"occurrence_id": occurrence_id, "now": tx.now_param()}
    )
    if row is None:
        return None
    o = row._mapping
    tx.observe_now(o["now"])
    control = None
    if o["control_state"] is not None:
        control = tx.conn.execute(st.CONTROL_BY_ID, {"occurrence_id": occurrence_id}).first()
    grant = None
    if o["status"] == S.RETRY_WAIT and not _resumes(o, control):
        grant = tx.conn.execute(
            st.UNCLAIMED_GRANT, {"occurrence_id": occurrence_id, "fence": o["fence"]}
        ).scalar()
    return o, control, grant


def _take(
    tx: Tx,
    o: Mapping[Any, Any],
    control: sa.Row[Any] | None,
    grant: str | None,
    decision: ClaimDecision,
    owner: str,
    lease_ms: int | None,
    again: bool,
) -> Claim | None:
    """CLAIM (or RECLAIM) as decided, in the run's pool slot, under its rate limit's token;
    then the pause request's new fence, the grant used and the event."""
    occurrence_id, state = o["id"], o["control_state"]
    held = limits.take(tx, o, decision.reclaiming)  # its pool slot and rate limit's token
    if held is None:
        return None
    if lease_ms is None:  # the job's own lease, from the snapshot this run executes
        lease_ms = _snapshot_lease_ms(o["definition"])
    attempt_inc = 0 if decision.free else 1
    event_data = _claimed_event(o, owner, attempt_inc, decision, grant)
    params = {
        "occurrence_id": occurrence_id,
        "seen_fence": o["fence"],
        "seen_status": o["status"],
        "seen_attempt": o["attempt"],
        "seen_control_state": state or "",
        "now": tx.now,
        "attempt_inc": attempt_inc,
        "owner": owner,
        "lease_until": tx.now + lease_ms,
        "event_data": event_data,
    }
    # PostgreSQL writes the claim's event in CLAIM's own statement (CLAIM_AND_LOG).
    transition = T.WORKER_RECLAIMS if decision.reclaiming else T.WORKER_CLAIMS
    if o["exclusive"] and tx.is_postgres:
        claimed = _claim_exclusive(tx, transition, params)
    else:
        claimed = door.run(tx, transition, params)
    if claimed is None:
        held.give_back(tx)
        # Moved since it was read (PostgreSQL): decide once more from what it is now.
        return claim(tx, occurrence_id, owner, lease_ms, again=False) if again else None
    fence = claimed._mapping["fence"]
    if state == ControlState.PAUSE_REQUESTED:
        door.run(
            tx,
            TC.PAUSE_REQUEST_REBOUND,
            {"of_occurrence": occurrence_id, "new_fence": fence, "now": tx.now},
        )
    if grant is not None:
        tx.conn.execute(st.USE_GRANT, {"grant_id": grant, "now": tx.now})
    door.append(
        tx,
        transition,
        EventType.OCCURRENCE_CLAIMED,
        event_data,
        job_id=o["job_id"],
        occurrence_id=occurrence_id,
        fence=fence,
    )
    after = control
    if control is not None and state != ControlState.TERMINAL:
        after = tx.conn.execute(st.CONTROL_BY_ID, {"occurrence_id": occurrence_id}).first()
    occurrence = occurrence_from_row(claimed, after)
    return Claim(
        occurrence=occurrence,
        owner=owner,
        fence=fence,
        lease_expires_at=occurrence.lease_expires_at,  # type: ignore[arg-type]
        resumed=decision.resuming,
        checkpoint=occurrence.checkpoint,
    )


def succeed_and_claim(
    tx: Tx,
    occurrence_id: int,
    owner: str,
    fence: int,
    result: Any,
    next_id: int,
    lease_ms: int | None,
) -> Claim | None:
    """Settle ``occurrence_id`` as succeeded and claim ``next_id`` in the same transaction.

    A batch's run N and run N+1 (issue 22): one commit instead of two. Both are durable
    before N+1's effects start. Raises LeaseLost (nothing written) as the settle does;
    a refused claim of ``next_id`` (None) leaves the settle in place.
    """
    if tx.is_postgres and not runs.owes_more(result):
        params = {
            **runs.succeed_plain_params(tx, occurrence_id, owner, fence, result),
            "next_id": next_id,
            "lease_ms": lease_ms,
        }
        settled, claimed = fast_lane.succeed_and_claim_queued(tx, params, owner)
        if claimed is not None:
            return claimed
        if settled:  # committed alone: the claim is a transaction of its own
            return claim(tx, next_id, owner, lease_ms)
    runs.settle(tx, occurrence_id, owner, fence, outcome="succeeded", result=result)
    return claim(tx, next_id, owner, lease_ms)


@functools.lru_cache(maxsize=256)
def _snapshot_lease_ms(definition: str) -> int:
    """The lease of a snapshot, parsed once per distinct snapshot text (a job's runs share
    one until it is revised), not once per claim."""
    return int(float(loads(definition)["lease"]) * 1000)


def _claimed_event(
    o: Mapping[Any, Any], owner: str, attempt_inc: int, decision: ClaimDecision, grant: str | None
) -> str:
    """``occurrence_claimed``'s data (canonical JSON: PostgreSQL's CLAIM writes it too)."""
    return dumps(
        {
            "owner": owner,
            "attempt": o["attempt"] + attempt_inc,  # CLAIM compares the attempt it read
            "previous_status": o["status"],
            "previous_owner": o["lease_owner"],
            **({"resumed": True} if decision.resuming else {}),
            # CLAIM counts the lost lease of a reclaim: what it writes, as the attempt.
            **({"lost_leases": o["lost_leases"] + 1} if decision.reclaiming else {}),
            **({"requeue_request_id": grant} if grant is not None else {}),
        }
    )


def _claim_exclusive(
    tx: Tx, transition: T.Transition, params: dict[str, Any]
) -> sa.Row[Any] | None:
    """CLAIM under a savepoint: two claimers on PostgreSQL may both count no runner,
    and the unique index ``occurrences_one_running_exclusive`` then refuses the second."""
    savepoint = tx.conn.begin_nested()
    try:
        claimed = door.run(tx, transition, params)
    except sa.exc.IntegrityError as exc:
        savepoint.rollback()
        if constraint_name(exc) != EXCLUSIVE_INDEX:
            raise
        return None
    savepoint.commit()
    return claimed


def _job_blocks(tx: Tx, o: Any) -> bool:
    """Another occurrence of the job keeps this one from starting (BLOCKING_IN_JOB): one
    runs (overlap queue/replace; the unique index ``occurrences_one_running_exclusive``
    refuses what this read cannot see), an earlier exclusive one could start first, or
    one waits for a verdict on its outcome."""
    params = {
        "job_id": o["job_id"],
        "occurrence_id": o["id"],
        "exclusive": bool(o["exclusive"]),
        "waits_turn": bool(o["exclusive"]) and o["status"] != S.RUNNING,
        "now": tx.now,
        "available_at": o["available_at"],
    }
    return bool(tx.conn.execute(st.BLOCKING_IN_JOB, params).scalar_one())


def claim_next(
    tx: Tx,
    owner: str,
    lease_ms: int | None,
    *,
    queues: tuple[str, ...] | None,
    kinds: tuple[str, ...] | None,
) -> Claim | None:
    """Claim the claimable occurrence of highest priority, oldest first, matching the
    filters, or None."""
    o = occurrences
    # Paused rows are never claimable (claimable_now): left in, a backlog of them fills
    # every candidate batch and starves the work behind it. A waiting row never carries
    # cancel_requested (CHECK ck_occurrences_no_waiting_cancel). Every expired lease is a
    # candidate: claim() reclaims it, or settles it when its expiry decides its end.
    waiting = sa.and_(
        claimable_now(tx.now),
        st.ROOM_IN_POOL,
        st.rate_token_free(tx.now),
        st.JOB_ALLOWS_CLAIM,
        # Left in, a job's backlog behind an unresolved run fills every candidate batch.
        st.NO_UNRESOLVED_RUN,
    )
    # Not filtered by JOB_ALLOWS_CLAIM: an expiry that settles the run does so whatever
    # the job (CLAIM refuses the reclaim of a disabled job's run); nor is a start deadline.
    expired = lease_expired(tx.now)
    for condition in (waiting, expired, start_expired(tx.now)):
        order = (o.c.priority.desc(), o.c.available_at, o.c.id)  # as the pump hints them
        query = sa.select(o.c.id).where(condition).order_by(*order).limit(16)
        if queues:
            query = query.where(o.c.queue.in_(queues))
        if kinds:
            query = query.where(o.c.kind.in_(kinds))
        # Another claimer skips these (PostgreSQL; SQLite renders no FOR UPDATE).
        query = query.with_for_update(skip_locked=True, of=o)
        batch = list(tx.conn.execute(query).scalars())
        got = _first_claim(tx, batch, owner, lease_ms)
        # Expired leases and deadlines the claims settled leave the candidates: a full
        # batch of them may hide a reclaimable one; look again until nothing moves.
        while got is None and condition is not waiting and len(batch) == 16:
            again = list(tx.conn.execute(query).scalars())
            if again == batch:
                break
            batch = again
            got = _first_claim(tx, batch, owner, lease_ms)
        if got is not None:
            return got
    return None


def _first_claim(tx: Tx, candidates: list[int], owner: str, lease_ms: int | None) -> Claim | None:
    claims = (claim(tx, occurrence_id, owner, lease_ms) for occurrence_id in candidates)
    return next((got for got in claims if got is not None), None)
