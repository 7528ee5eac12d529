"""Helpers for the adapter tests: occurrences, contexts, and callable job targets."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from typing import Any

from adapters.base import ExecutionContext, HandBack
from kernel.spec.jobspec import validate_job_spec
from kernel.states import OccurrenceStatus
from kernel.types import Occurrence

__all__ = [
    "SafePoints",
    "make_occurrence",
    "make_context",
    "add",
    "count_to",
    "swallow_errors",
]

_NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def make_occurrence(
    kind: str, payload: dict[str, Any], *, occurrence_id: int = 7, attempt: int = 1
) -> Occurrence:
    """A running occurrence of job ``nightly`` whose snapshot holds ``payload``.

    The snapshot is what the kernel would store: the payload goes through the same
    validation (:func:`~kernel.spec.jobspec.validate_job_spec`) and comes out normalised.
    """
    definition = validate_job_spec({"id": "nightly", "kind": kind, "payload": payload}).to_dict()
    return Occurrence(
        id=occurrence_id,
        job_id="nightly",
        job_revision=1,
        trigger_key="cron:2026-11-29T12:00:00Z",
        scheduled_for=_NOW,
        status=OccurrenceStatus.RUNNING,
        attempt=attempt,
        max_attempts=3,
        fence=attempt,
        lease_owner="worker-1",
        lease_expires_at=_NOW,
        available_at=_NOW,
        dispatched_at=_NOW,
        definition=definition,
        last_error=None,
        result=None,
        skip_reason=None,
        cancel_requested=False,
        # Each one another occurrence: a shell run's cgroup is named after its occurrence,
        # and tests running beside this one make their own occurrence 7.
        created_at=datetime.now(UTC),
        updated_at=_NOW,
        settled_at=None,
    )


class SafePoints:
    """Plays the runtime's part at safe points: records each, hands back when told to."""

    def __init__(self, *, hand_back_at: int | None = None) -> None:
        self.seen: list[tuple[str, Any]] = []
        self._hand_back_at = hand_back_at

    def __call__(self, safe_point: str, data: Any) -> None:
        self.seen.append((safe_point, data))
        if len(self.seen) == self._hand_back_at:
            raise HandBack(f"paused at {safe_point}")


def make_context(
    kind: str,
    payload: dict[str, Any],
    *,
    safe_points: SafePoints | None = None,
    resumed: Any = None,
    cancelled: threading.Event | None = None,
    timeout_s: float | None = None,
    kill_grace_s: float = 2.0,
    effects_deadline: float | None = None,
    output: list[tuple[str, str]] | None = None,
    attempt: int = 1,
    redelivered: bool = False,
) -> ExecutionContext:
    """An execution context for an occurrence of ``kind`` running ``payload`` (its first
    attempt unless told)."""
    return ExecutionContext(
        make_occurrence(kind, payload, attempt=attempt),
        resumed=resumed,
        redelivered=redelivered,
        cancelled=cancelled or threading.Event(),
        on_safe_point=safe_points or SafePoints(),
        logger=logging.getLogger("tests.adapters"),
        timeout_s=timeout_s,
        kill_grace_s=kill_grace_s,
        effects_deadline=lambda: effects_deadline,
        on_output=(lambda *chunk: None)
        if output is None
        else (lambda *chunk: output.append(chunk)),
    )


# Callable-adapter targets, addressed as "unit.adapter_support:<name>".


def add(a: int, b: int) -> int:
    return a + b


def count_to(n: int, *, ctx: ExecutionContext) -> dict[str, Any]:
    """Counts to ``n``, checkpointing after each step and resuming from the last one."""
    done: int = ctx.resumed["done"] if ctx.resumed else 0
    start = done
    while done < n:
        done += 1
        ctx.checkpoint({"done": done})
    return {"done": done, "started_at": start, "job_id": ctx.occurrence.job_id}


def swallow_errors(ctx: ExecutionContext) -> str:
    """Job code that catches every Exception around its checkpoint."""
    try:
        ctx.checkpoint({"step": 1})
    except Exception:
        return "swallowed"
    return "finished"
