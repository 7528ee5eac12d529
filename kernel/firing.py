"""Materialising firings: occurrences created once per logical firing (SPEC I1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from kernel import transitions as T
from kernel.events import EventType
from kernel.records import dumps
from kernel.run_params import params_digest
from kernel.schema import occurrences
from kernel.states import OccurrenceStatus
from kernel.tx import Tx

__all__ = ["Created", "idempotency_key", "create_occurrence"]


@dataclass(frozen=True, slots=True)
class Created:
    """The outcome of one create-if-absent: the row's id and whether this call made it."""

    id: int | None
    created: bool
    status: OccurrenceStatus | None
    skip_reason: str | None = None


def idempotency_key(
    job_id: str, trigger_key: str, revision: int, params: dict[str, Any] | None = None
) -> str:
    """(job, trigger key, revision), and the run parameters' digest when it has any."""
    key = f"{job_id}|{trigger_key}|r{revision}"
    return key if params is None else f"{key}|p{params_digest(params)}"


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
    ``params``: run parameters (:mod:`kernel.run_params`), already merged into ``spec``;
    part of the idempotency key and of the event. ``exclusive``: runs one at a time
    whatever the overlap policy (a sequential backfill).
    """
    awaiting = status == OccurrenceStatus.AWAITING_APPROVAL
    values = {
        "job_id": job_id,
        "job_revision": revision,
        "trigger_key": trigger_key,
        "idempotency_key": idempotency_key(job_id, trigger_key, revision, params),
        "scheduled_for": scheduled_for,
        "status": status.value,
        "attempt": 0,
        "max_attempts": spec["max_attempts"],
        "fence": 0,
        "available_at": available_at if available_at is not None else tx.now,
        "queue": spec["queue"],
        "kind": spec["kind"],
        "delivery": spec["delivery"],
        "exclusive": exclusive or spec["overlap"] in ("queue", "replace"),
        "pool": spec["pool"],
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
    inserted = T.run(tx, T.BEAT_FIRES, values)
    new_id = inserted.id if inserted is not None else None
    if new_id is None:
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
    event = (
        EventType.OCCURRENCE_SKIPPED
        if status == OccurrenceStatus.SKIPPED
        else EventType.OCCURRENCE_CREATED
    )
    data: dict[str, Any] = {
        "trigger_key": trigger_key,
        "revision": revision,
        "scheduled_for": scheduled_for,
    }
    if skip_reason:
        data["reason"] = skip_reason
    if parent_id is not None:
        data["parent_id"] = parent_id
    if awaiting:
        data["awaiting_approval"] = True
    if params is not None:
        data["params"] = params
    data.update(extra or {})
    tx.emit(event, job_id=job_id, occurrence_id=new_id, **data)
    return Created(id=new_id, created=True, status=status, skip_reason=skip_reason)
