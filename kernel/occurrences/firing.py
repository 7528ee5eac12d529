"""How a firing becomes an occurrence, for every way one is made (SPEC I1).

Beat's firings, ``run-now``, chained children and backfills all pass the same three
steps, in this order:

1. **Admission** (:func:`admit`): the job's overlap policy, then its backlog bound
   ``max_queued``, whatever the policy: the occurrences waiting (queued or retry_wait) —
   under ``queue``, those waiting behind the one that runs or runs next (or waits for a
   verdict on its outcome). Admissions of one job are serialised by its job row (locked
   on PostgreSQL; SQLite's writer lock already serialises), so two concurrent ``run-now``
   calls cannot both pass a bound that leaves room for one. A retry reuses its
   occurrence and is not admitted again.
2. **Gates** (:func:`create_gated`): the job's approval hold and its budget; an
   operator's run-now passes the budget but not the hold.
3. **The insert** (:func:`create_occurrence`): once per logical firing; the unique keys
   decide, not a prior read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from kernel.db.schema import jobs, occurrences
from kernel.errors import NotFound, RevisionConflict, StateConflict
from kernel.events import EventType
from kernel.limits import budgets
from kernel.occurrences import approvals
from kernel.occurrences.control import request_cancel
from kernel.occurrences.rows import record_request
from kernel.records import dumps, job_from_row
from kernel.spec.durations import rate_limit_name
from kernel.spec.jobspec import MAX_LOST_LEASES
from kernel.spec.run_params import params_digest, with_params
from kernel.states import ACTIVE, UNSETTLED, WAITING, OccurrenceStatus
from kernel.transaction.tx import Tx
from kernel.transitions import door
from kernel.transitions import occurrences as T
from kernel.types import Job

__all__ = [
    "OVERLAP",
    "QUEUE_FULL",
    "Created",
    "admit",
    "backlog_full",
    "create_gated",
    "create_occurrence",
    "idempotency_key",
    "lock_job",
    "run_now",
]

S = OccurrenceStatus
OCC = occurrences
#: Skip reasons of a refused admission.
OVERLAP = "overlap"
QUEUE_FULL = "queue_full"
# Awaiting approval is backlog (WAITING) but not active for `skip`:
# `approval.max_pending` bounds those, and each runs only when a person lets it.
# An at-most-once run awaiting adjudication may still be having its effect: a
# `skip` job does not start another beside it, and under `queue` it is the one the
# others wait behind (UNSETTLED; no claim starts a run of its job until it is decided:
# kernel.occurrences.claiming, BLOCKING_IN_JOB). `replace` cancels the ACTIVE ones (no cancel can
# end one awaiting adjudication).
_SKIP_ACTIVE = tuple(s for s in UNSETTLED if s != S.AWAITING_APPROVAL)


def lock_job(tx: Tx, job_id: str) -> Job:
    """Read a job, holding its row (PostgreSQL) until the transaction ends.

    Raises:
        NotFound: no such job.
    """
    # SQLite renders no FOR UPDATE: its write transaction already holds every row.
    query = sa.select(jobs).where(jobs.c.id == job_id).with_for_update()
    row = tx.conn.execute(query).first()
    if row is None:
        raise NotFound(f"job {job_id!r} does not exist", job_id=job_id)
    return job_from_row(row)


def admit(tx: Tx, job_id: str, spec: dict[str, Any], *, force: bool = False) -> str | None:
    """Apply the overlap policy and the backlog bound before a new occurrence.

    The caller holds the job row (Beat's cursor CAS, or :func:`lock_job`).
    ``force`` (an operator's ``run-now --force``) passes both. Under ``replace``
    the active occurrences are cancelled (a running one is asked to stop).

    Returns:
        None to admit, else the skip reason (``overlap`` or ``queue_full``).
    """
    if force:
        return None
    policy = spec["overlap"]
    if policy == "skip":
        return OVERLAP if _reaches(tx, job_id, _SKIP_ACTIVE, 1) else None
    if policy == "replace":
        active = tx.conn.execute(
            sa.select(OCC.c.id).where(OCC.c.job_id == job_id, OCC.c.status.in_(ACTIVE))
        ).scalars()
        for occurrence_id in active:  # the new occurrence waits (exclusive) until these end
            request_cancel(tx, occurrence_id, reason="replaced")
        return None
    return QUEUE_FULL if backlog_full(tx, job_id, spec) else None


def backlog_full(tx: Tx, job_id: str, spec: dict[str, Any], *, inserted: bool = False) -> bool:
    """Whether the job's backlog leaves no room for another occurrence under its bound
    ``max_queued`` (``overlap`` allow or queue); ``inserted``: whether the occurrences this
    transaction just made overrun it. The caller holds the job row."""
    statuses: tuple[str, ...]
    if spec["overlap"] == "queue":
        # Claims are exclusive: one active occurrence runs (or runs next) and the
        # others wait behind it; those are what max_queued bounds.
        statuses, bound = UNSETTLED, spec["max_queued"] + 1
    else:  # allow: every waiting occurrence is backlog
        statuses, bound = WAITING, spec["max_queued"]
    return _reaches(tx, job_id, statuses, bound + inserted)


def _reaches(tx: Tx, job_id: str, statuses: tuple[str, ...], bound: int) -> bool:
    """Whether the job has at least ``bound`` occurrences in ``statuses``, counted no
    further than that: a firing of a job with a large backlog must not read the whole
    backlog (index ``occurrences_job``)."""
    counted = (
        sa.select(OCC.c.id)
        .where(OCC.c.job_id == job_id, OCC.c.status.in_(statuses))
        .limit(bound)
        .subquery()
    )
    return tx.conn.execute(sa.select(sa.func.count()).select_from(counted)).scalar_one() >= bound


@dataclass(frozen=True, slots=True)
class Created:
    """The outcome of one create-if-absent: the row's id and whether this call made it."""

    id: int | None
    created: bool
    status: OccurrenceStatus | None
    skip_reason: str | None = None


def create_gated(
    tx: Tx,
    *,
    job_id: str,
    spec: dict[str, Any],
    hold_for_approval: bool = True,
    refused: str | None = None,
    **occurrence: Any,
) -> Created:
    """:func:`create_occurrence` of a firing the job's gates allow.

    ``refused`` is the admission's skip reason (:func:`admit`): such a
    firing is recorded skipped and passes no gate (it reserves nothing).
    Held for approval when the job requires it (skipped, reason ``approval_backlog``,
    when ``max_pending`` already wait); skipped with reason ``budget`` when its budget's
    window is spent; else queued. The budget reservation belongs to the occurrence made,
    and is given back when the firing existed already.
    """
    status, reason = (S.SKIPPED, refused) if refused else (S.QUEUED, None)
    if status != S.SKIPPED and hold_for_approval and spec.get("approval"):
        status, reason = approvals.hold(tx, job_id, spec["approval"])
    reservation = None
    if status != S.SKIPPED and spec.get("budget") is not None:
        reservation = budgets.reserve(tx, job_id, spec["budget"])
        if reservation is None:
            status, reason = S.SKIPPED, "budget"
    extra = {
        **(occurrence.pop("extra", None) or {}),
        **({"budget": reservation.budget} if reservation is not None else {}),
    }
    made = create_occurrence(
        tx, job_id=job_id, spec=spec, status=status, skip_reason=reason, extra=extra, **occurrence
    )
    if reservation is not None:
        if made.created and made.id is not None:
            budgets.attach(tx, made.id, reservation)
        else:
            budgets.unreserve(tx, reservation)
    return made


def idempotency_key(
    job_id: str, trigger_key: str, revision: int, params: dict[str, Any] | None = None
) -> str:
    """(job, trigger key, revision), and the run parameters' digest when it has any."""
    key = f"{job_id}|{trigger_key}|r{revision}"
    return key if params is None else f"{key}|p{params_digest(params)}"


def _deadline_ms(available_at: int, expires_s: float | None) -> int | None:
    """The start deadline of an occurrence that may first start at ``available_at`` (ms)
    and expires ``expires_s`` after it (None: no deadline). Counted from the time it may
    start, as Celery counts from when Beat or the caller sends the message."""
    return None if expires_s is None else available_at + round(expires_s * 1000)


def create_occurrence(
    tx: Tx,
    *,
    job_id: str,
    revision: int,
    spec: dict[str, Any],
    trigger_key: str,
    scheduled_for: int,
    status: OccurrenceStatus = OccurrenceStatus.QUEUED,
    skip_reason: str | None = None,
    available_at: int | None = None,
    parent_id: int | None = None,
    chain_depth: int = 0,
    extra: dict[str, Any] | None = None,
    params: dict[str, Any] | None = None,
    exclusive: bool = False,
) -> Created:
    """Insert the occurrence unless its firing exists (under any revision).

    The unique keys decide, not a prior read: two Beats racing on one firing
    both run this, and exactly one row results. ``extra``: more data for the event.
    ``params``: run parameters (:mod:`kernel.spec.run_params`), already merged into ``spec``;
    part of the idempotency key and of the event. ``exclusive``: runs one at a time
    whatever the overlap policy (a sequential backfill).
    """
    awaiting = status == OccurrenceStatus.AWAITING_APPROVAL
    available_at = available_at if available_at is not None else tx.now
    values = {
        "job_id": job_id,
        "job_revision": revision,
        "trigger_key": trigger_key,
        "idempotency_key": idempotency_key(job_id, trigger_key, revision, params),
        "scheduled_for": scheduled_for,
        "status": status.value,
        "attempt": 0,
        "max_attempts": spec["max_attempts"],
        "max_lost_leases": spec.get("max_lost_leases", MAX_LOST_LEASES),
        "fence": 0,
        "available_at": available_at,
        "expires_at": _deadline_ms(available_at, spec.get("expires")),
        "queue": spec["queue"],
        "kind": spec["kind"],
        "delivery": spec["delivery"],
        "exclusive": exclusive or spec["overlap"] in ("queue", "replace"),
        "pool": spec["pool"],
        "priority": spec.get("priority", 0),
        "rate_limit": rate_limit_name(spec),
        "definition": dumps(spec),
        "skip_reason": skip_reason,
        "cancel_requested": False,
        "parent_id": parent_id,
        "chain_depth": chain_depth,
        "created_at": tx.now,
        "updated_at": tx.now,
        "settled_at": tx.now if status == OccurrenceStatus.SKIPPED else None,
        "approval_due_at": tx.now + int(spec["approval"]["timeout"] * 1000) if awaiting else None,
        "approval_auto": spec["approval"]["auto"] if awaiting else None,
    }
    inserted = door.run(tx, T.BEAT_FIRES, values)
    if inserted is None or inserted.id is None:
        return _existing(tx, job_id, trigger_key)
    event = (
        EventType.OCCURRENCE_SKIPPED
        if status == OccurrenceStatus.SKIPPED
        else EventType.OCCURRENCE_CREATED
    )
    data: dict[str, Any] = {
        "trigger_key": trigger_key,
        "revision": revision,
        "scheduled_for": scheduled_for,
        **({"reason": skip_reason} if skip_reason else {}),
        **({"parent_id": parent_id} if parent_id is not None else {}),
        **({"awaiting_approval": True} if awaiting else {}),
        **({"params": params} if params is not None else {}),
        **(extra or {}),
    }
    tx.emit(event, job_id=job_id, occurrence_id=inserted.id, **data)
    return Created(id=inserted.id, created=True, status=status, skip_reason=skip_reason)


def _existing(tx: Tx, job_id: str, trigger_key: str) -> Created:
    """The firing the unique keys kept from a second insert (None: under another key)."""
    existing = tx.conn.execute(
        sa.select(occurrences.c.id, occurrences.c.status).where(
            occurrences.c.job_id == job_id, occurrences.c.trigger_key == trigger_key
        )
    ).first()
    return Created(
        id=existing.id if existing else None,
        created=False,
        status=OccurrenceStatus(existing.status) if existing else None,
    )


def _refusal(job: Job, reason: str, active: list[int]) -> StateConflict:
    if reason == OVERLAP:
        why = f"its overlap policy is skip and occurrence(s) {active} are active"
    else:
        why = f"its backlog is full (max_queued {job.spec['max_queued']}; active {active})"
    return StateConflict(
        f"job {job.id!r} refuses a run now: {why}; wait for them, cancel them, or pass "
        "--force to run it anyway",
        job_id=job.id,
        reason=reason,
        active=active,
    )


def run_now(
    tx: Tx,
    job_id: str,
    request_id: str,
    operator: str,
    *,
    force: bool = False,
    params: dict[str, Any] | None = None,
) -> tuple[int, bool]:
    """Create a ``manual:<request id>`` occurrence (also for a disabled job); the cursor stays.

    Admitted like a firing (overlap policy, ``max_queued``) unless ``force``. ``params``
    are merged into this occurrence's payload only (:mod:`kernel.spec.run_params`); a replay
    of the request id with other params is refused (EVIDENCE_CONFLICT).

    Returns:
        (occurrence id, deduplicated): a retried request id finds its first occurrence.

    Raises:
        StateConflict: not admitted (``reason`` ``overlap`` or ``queue_full``).
        RevisionConflict: a replay after the job was revised; names the original occurrence.
    """
    job = lock_job(tx, job_id)
    spec = job.spec if params is None else with_params(job.spec, params)
    trigger_key = f"manual:{request_id}"
    if record_request(tx, request_id, "run_now", job_id, {"params": params}, operator):
        first = tx.conn.execute(
            sa.select(OCC.c.id, OCC.c.job_revision).where(
                OCC.c.job_id == job_id, OCC.c.trigger_key == trigger_key
            )
        ).first()
        if first is None:
            raise StateConflict(f"run-now request {request_id!r} left no occurrence", job_id=job_id)
        if first.job_revision != job.revision:
            raise RevisionConflict(
                f"run-now request {request_id!r} made occurrence {first.id} from revision "
                f"{first.job_revision} of job {job_id!r}, which is now at revision "
                f"{job.revision}; use a new request id to run the current definition",
                job_id=job_id,
                occurrence_id=first.id,
                expected_revision=first.job_revision,
                actual_revision=job.revision,
            )
        return first.id, True
    reason = admit(tx, job_id, job.spec, force=force)
    if reason is not None:
        active = tx.conn.execute(
            sa.select(OCC.c.id)
            .where(OCC.c.job_id == job_id, OCC.c.status.in_(_SKIP_ACTIVE))
            .order_by(OCC.c.id)
        ).scalars()
        raise _refusal(job, reason, list(active))
    made = create_gated(
        tx,
        job_id=job_id,
        revision=job.revision,
        spec=spec,
        trigger_key=trigger_key,
        scheduled_for=tx.now,
        hold_for_approval=False,
        params=params,
    )
    if made.id is None:
        raise StateConflict(f"run-now request {request_id!r} left no occurrence", job_id=job_id)
    if made.created:
        tx.emit(
            EventType.JOB_RUN_NOW,
            job_id=job_id,
            occurrence_id=made.id,
            request_id=request_id,
            operator=operator,
            **({"force": True} if force else {}),
        )
    return made.id, not made.created
