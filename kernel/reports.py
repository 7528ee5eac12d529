"""Frozen records the kernel hands out about runs that ended: an adapter's verdict on an
uncertain run and the adjudication it led to, a job's health, a failed run's notification.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kernel.states import Decision
from kernel.types import Occurrence, iso_z

__all__ = ["Verdict", "Adjudication", "AdapterAsk", "JobHealth", "Notification"]


# -- adapter adjudication (kernel/occurrences/adapter_verdicts.py) ------------------------------


@dataclass(frozen=True, slots=True)
class Verdict:
    """An adapter's answer about an uncertain run: ``applied`` or ``not_applied``, and the
    evidence it rests on (a small JSON object, recorded in the event)."""

    decision: Decision
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Adjudication:
    """The last verdict on an earlier run of an occurrence whose outcome was unknown.

    ``authority`` is ``operator`` or ``adapter``; ``evidence`` is what the adapter
    reported, or the operator's name and request id; ``fence`` names the uncertain run.
    """

    decision: Decision
    authority: str
    evidence: dict[str, Any]
    fence: int | None
    decided_at: datetime

    def to_dict(self) -> dict[str, Any]:
        return {
            "decision": self.decision.value,
            "authority": self.authority,
            "evidence": self.evidence,
            "fence": self.fence,
            "decided_at": iso_z(self.decided_at),
        }


@dataclass(frozen=True, slots=True)
class AdapterAsk:
    """A worker's live ask of an occurrence's adapter: answer with ``token`` by ``deadline``."""

    occurrence: Occurrence
    token: str
    deadline: datetime


# -- job health (kernel/jobs/health.py) ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobHealth:
    """How one job is doing (:func:`kernel.jobs.health.job_health`).

    Attributes:
        job_id: the job.
        last_success_at: when its latest successful run settled (None: none kept).
        last_failure_at: when its latest run settled as a dead letter (None: none kept).
        consecutive_failures: dead letters settled since its last success.
        next_fire_at: its next scheduled firing (None: disabled, unscheduled, or done).
    """

    job_id: str
    last_success_at: datetime | None
    last_failure_at: datetime | None
    consecutive_failures: int
    next_fire_at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "last_success_at": iso_z(self.last_success_at),
            "last_failure_at": iso_z(self.last_failure_at),
            "consecutive_failures": self.consecutive_failures,
            "next_fire_at": iso_z(self.next_fire_at),
        }


@dataclass(frozen=True, slots=True)
class Notification:
    """A job's ``notify`` of one event of a run (:mod:`kernel.transitions.notices`).

    Attributes:
        id: the notification (sent as ``X-Kernel-Notification`` / in the body).
        occurrence_id, fence: the run it is about.
        job_id: its job.
        event: ``dead_letter``, ``failed``, ``needs_adjudication``, ``overrun`` or
            ``stranded``.
        state: ``pending``, ``delivering``, ``delivered`` or ``failed``.
        tries: tries started so far.
        next_at: when a try may start (pending).
        token: the live try's claim (delivering), else None.
        target: the job's ``notify`` as the run's definition held it.
        body: what is delivered.
        last_error: why the latest try failed.
    """

    id: int
    occurrence_id: int
    fence: int
    job_id: str
    event: str
    state: str
    tries: int
    next_at: datetime
    token: str | None
    target: dict[str, Any]
    body: dict[str, Any]
    last_error: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "occurrence_id": self.occurrence_id,
            "fence": self.fence,
            "job_id": self.job_id,
            "event": self.event,
            "state": self.state,
            "tries": self.tries,
            "next_at": iso_z(self.next_at),
            "last_error": self.last_error,
        }
