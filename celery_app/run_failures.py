"""What a run's failure says beyond its adapter's verdict: the job's traceback (secrets
masked), a TIMEOUT when Celery's soft time limit stopped it, and, for an outcome that
is unknown and may not repeat, its adapter asked at once.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterable

from billiard.exceptions import SoftTimeLimitExceeded

from adapters.base import Adapter, AdapterError, ErrorClass
from adapters.secrets import scrub
from celery_app.adjudication import ask_adapter
from kernel import Effect, Kernel, Occurrence, StorageUnavailable

__all__ = ["ask_at_once", "job_traceback", "timeout_failure"]

log = logging.getLogger("celery_kernel.runtime")


def job_traceback(exc: BaseException, secrets: Iterable[str]) -> str | None:
    """The traceback of what the job's code raised, secrets masked; None for a failure an
    adapter classified itself (its message says it all: an exit status, an HTTP status)."""
    if isinstance(exc, AdapterError):
        if exc.__cause__ is None:
            return None
        exc = exc.__cause__
    text = "".join(traceback.format_exception(exc))
    return scrub(text, secrets)


def timeout_failure(exc: BaseException, timeout_s: float | None) -> ErrorClass | None:
    """A TIMEOUT failure when Celery's soft time limit (the job's timeout) stopped the body,
    whether it surfaced as itself or as the cause of an adapter's error; retryable unless
    that error says otherwise (a task's timeout is final unless its ``autoretry_for`` lists
    it, as under Celery)."""
    if not isinstance(exc, SoftTimeLimitExceeded) and not isinstance(
        exc.__cause__, SoftTimeLimitExceeded
    ):
        return None
    retryable = exc.retryable if isinstance(exc, AdapterError) else True
    limit = f"{timeout_s:g} s" if timeout_s is not None else "its time limit"
    message = f"the run exceeded its timeout of {limit}"
    return ErrorClass(retryable, "TIMEOUT", message, Effect.UNKNOWN)


def ask_at_once(kernel: Kernel, adapter: Adapter, occurrence: Occurrence) -> None:
    """The run's outcome is unknown and it may not repeat: its adapter is asked now, by this
    worker, as Beat's pump would hint it (``kernel.adjudicate_occurrence``); whoever takes
    the ask first asks, the other finds it taken."""
    try:
        ask_adapter(kernel, {occurrence.kind: adapter}, occurrence.id, occurrence.kind)
    except StorageUnavailable as exc:
        log.warning(
            "occurrence %s needs adjudication; its adapter could not be asked now (%s): "
            "Beat's pump hints the ask",
            occurrence.id,
            exc,
            extra={"action": "storage_unavailable", "occurrence_id": occurrence.id},
        )
