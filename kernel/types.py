"""Frozen records the kernel hands out. Adapters and the Celery layer import these."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from kernel.errors import RevisionConflict
from kernel.states import ControlState, OccurrenceStatus

__all__ = [
    "Firing",
    "Job",
    "Control",
    "Occurrence",
    "Claim",
    "PendingPause",
    "RenewAnswer",
    "Event",
    "DispatchHint",
    "ActionResult",
    "Beat",
    "Pool",
    "iso_z",
]


class Firing(NamedTuple):
    """One logical firing of a job's schedule: the trigger key that names it and its
    instant (timezone-aware). Beat plans in this shape and ``Kernel.fire`` takes it as it
    is; a plain ``(trigger_key, at)`` tuple is the same value."""

    trigger_key: str
    at: datetime


@dataclass(frozen=True, slots=True)
class Job:
    """A job definition as stored: the normalised spec plus its bookkeeping."""

    id: str
    revision: int
    digest: str
    spec: dict[str, Any]
    enabled: bool
    planned: bool
    next_fire_at: datetime | None
    next_trigger_key: str | None
    defined_at: datetime
    updated_at: datetime

    @property
    def kind(self) -> str:
        return str(self.spec["kind"])

    @property
    def queue(self) -> str:
        return str(self.spec["queue"])

    def check_revision(self, expected_revision: int) -> None:
        """Refuse a change made from a stale read: RevisionConflict unless this job is at
        ``expected_revision`` (a revision, and a dry run of one, check it alike)."""
        if self.revision != expected_revision:
            raise RevisionConflict(
                f"job {self.id!r} is at revision {self.revision}, not {expected_revision}; "
                "re-read it and try again",
                job_id=self.id,
                expected_revision=expected_revision,
                actual_revision=self.revision,
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "revision": self.revision,
            "digest": self.digest,
            "enabled": self.enabled,
            "next_fire_at": iso_z(self.next_fire_at),
            "next_trigger_key": self.next_trigger_key,
            "defined_at": iso_z(self.defined_at),
            "updated_at": iso_z(self.updated_at),
            "spec": self.spec,
        }


@dataclass(frozen=True, slots=True)
class Control:
    """The runtime control row of one occurrence (pause/resume)."""

    state: ControlState
    revision: int
    expected_fence: int
    pause_request_id: str | None
    resume_request_id: str | None
    safe_points: tuple[str, ...]
    requested_at: datetime | None
    paused_at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state.value,
            "revision": self.revision,
            "expected_fence": self.expected_fence,
            "pause_request_id": self.pause_request_id,
            "resume_request_id": self.resume_request_id,
        }


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One logical firing of a job and everything the kernel knows of its run.

    ``definition`` is the job spec snapshot taken at creation (I5); ``payload``
    is that snapshot's payload, the adapter's input.
    """

    id: int
    job_id: str
    job_revision: int
    trigger_key: str
    scheduled_for: datetime
    status: OccurrenceStatus
    attempt: int
    max_attempts: int
    fence: int
    lease_owner: str | None
    lease_expires_at: datetime | None
    available_at: datetime
    dispatched_at: datetime | None
    definition: dict[str, Any]
    last_error: dict[str, Any] | None
    result: Any
    skip_reason: str | None
    cancel_requested: bool
    created_at: datetime
    updated_at: datetime
    settled_at: datetime | None
    control: Control | None = None
    checkpoint: Any = None
    #: While awaiting approval: when Beat applies the job's ``approval.auto``.
    approval_due_at: datetime | None = None
    #: The start deadline (``expires``): not started by then, it is skipped ``expired``.
    expires_at: datetime | None = None

    @property
    def kind(self) -> str:
        return str(self.definition["kind"])

    @property
    def queue(self) -> str:
        return str(self.definition["queue"])

    @property
    def payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = self.definition["payload"]
        return payload

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of SPEC §7 (``show`` adds checkpoint, result, events); an
        occurrence awaiting approval adds ``approval_due_at``, one with a start deadline
        ``expires_at``."""
        approval = {"approval_due_at": iso_z(self.approval_due_at)} if self.approval_due_at else {}
        deadline = {"expires_at": iso_z(self.expires_at)} if self.expires_at else {}
        return {
            "id": self.id,
            "job_id": self.job_id,
            "job_revision": self.job_revision,
            "status": self.status.value,
            "attempt": self.attempt,
            "max_attempts": self.max_attempts,
            "fence": self.fence,
            "trigger_key": self.trigger_key,
            "scheduled_for": iso_z(self.scheduled_for),
            "available_at": iso_z(self.available_at),
            "lease_owner": self.lease_owner,
            "lease_expires_at": iso_z(self.lease_expires_at),
            "last_error": self.last_error,
            "skip_reason": self.skip_reason,
            "cancel_requested": self.cancel_requested,
            "control": self.control.to_dict() if self.control else None,
            "created_at": iso_z(self.created_at),
            "settled_at": iso_z(self.settled_at),
            **approval,
            **deadline,
        }


@dataclass(frozen=True, slots=True)
class Claim:
    """What a worker holds after a successful claim.

    ``resumed`` is true when this claim resumes a paused occurrence; then
    ``checkpoint`` is the data stored when it paused.
    """

    occurrence: Occurrence
    owner: str
    fence: int
    lease_expires_at: datetime
    resumed: bool
    checkpoint: Any


@dataclass(frozen=True, slots=True)
class PendingPause:
    request_id: str
    revision: int
    safe_points: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RenewAnswer:
    """A renewed lease and any request the worker must act on."""

    lease_expires_at: datetime
    pause: PendingPause | None
    cancel_requested: bool


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    type: str
    job_id: str | None
    occurrence_id: int | None
    fence: int | None
    at: datetime
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "job_id": self.job_id,
            "occurrence_id": self.occurrence_id,
            "fence": self.fence,
            "at": iso_z(self.at),
            "data": self.data,
        }


@dataclass(frozen=True, slots=True)
class DispatchHint:
    """An occurrence the dispatch pump should publish a message for."""

    occurrence_id: int
    job_id: str
    queue: str
    kind: str
    #: The definition's ``timeout`` in seconds (None: none), for the hint's time limits.
    timeout: float | None = None
    #: The occurrence's payload (its definition's), for monitors' view of the hint: a
    #: ``task`` run's args and kwargs. Shared between hints of one definition: read only.
    payload: Mapping[str, Any] | None = None
    #: 0-255, higher first: the hint's broker priority (Celery's, translated by the glue).
    priority: int = 0
    #: The occurrence's trigger key, from which the glue names the run's Celery task id.
    trigger_key: str = ""


@dataclass(frozen=True, slots=True)
class ActionResult:
    """The answer to an operator action; ``deduplicated`` marks a replayed request id."""

    occurrence: Occurrence
    request_id: str
    deduplicated: bool


@dataclass(frozen=True, slots=True)
class Beat:
    id: str
    host: str
    interval_s: float
    last_tick_at: datetime
    started_at: datetime


@dataclass(frozen=True, slots=True)
class Pool:
    """A resource pool: at most ``limit`` of its occurrences run at once.

    ``running`` is the counter claims are admitted by; ``waiting`` counts its queued
    and retry_wait occurrences; ``defined`` is false for a pool only jobs name (limit 1).
    """

    name: str
    limit: int
    running: int
    waiting: int
    defined: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "limit": self.limit,
            "running": self.running,
            "waiting": self.waiting,
            "defined": self.defined,
        }


def iso_z(value: datetime | None) -> str | None:
    """``value`` as ISO 8601 text with ``Z`` for UTC, as the records' ``to_dict`` show it."""
    return None if value is None else value.isoformat().replace("+00:00", "Z")
