"""A kernel run's outcome in the app's result backend, written as Celery's worker writes it.

A routed call answers Celery's ``AsyncResult`` under the run's task id
(:func:`celery_app.task_call.task_id`); the body's end is stored here under that id, as
Celery's tracer stores it (``celery/app/trace.py``): SUCCESS with the return value through
the backend's own serializer, RETRY with the exception of a run the kernel retries,
FAILURE with the exception and its traceback. ``ignore_result`` (the call's, else the
task's, else ``task_ignore_result``) skips a success, and a failure unless the task sets
``store_errors_even_if_ignored``. The kernel keeps its own bounded JSON copy of the value
(:func:`kernel.records.stored_result`); the backend is for Celery's callers.

A routed run the kernel ended without its body's answer (a lease lost on its last
attempt, an operator's abandon, a cancel, a rejected approval) reaches the backend
through the kernel's owed row (:func:`kernel.transitions.notices.owe_result`), which a
worker delivers once with :func:`store_end`: FAILURE with :class:`RunFailed` naming the
kernel's error code for a dead letter, REVOKED for a cancelled or skipped run, as Celery
shows a revoked task.

A failure is written under the ids of the chain's steps after the run too (the run's
request names them: kernel/spec/task_runs.py ``chain_ids``), as Celery's backend writes it
(``mark_as_failure``'s ``request.chain``): the steps never run, and ``.get()`` on the
chain raises at once.

The kernel owns what Celery would chain from the backend: errbacks are not called here.
A chord whose member's end failed it (the worker's dead letter, or an owed end) has its
body's FAILURE written here, with Celery's ``ChordError``, as Celery's backend writes it
when a member fails (the body's errbacks its children): the body never runs, and its
caller's ``.get()`` raises.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from billiard.einfo import ExceptionInfo
from celery.app.task import Context, get_actual_ignore_result
from celery.exceptions import ChordError
from celery.utils import uuid
from celery.utils.serialization import get_pickleable_exception
from kombu.exceptions import EncodeError

from adapters.base import AdapterError
from celery_app.enqueueing import RunFailed
from kernel import caller_key

__all__ = [
    "store_chord_failure",
    "store_end",
    "store_failure",
    "store_retry",
    "store_success",
]

log = logging.getLogger("celery_kernel.worker")


def store_success(task: Any, run_id: str, retval: Any) -> None:
    """SUCCESS with ``retval`` unless the result is ignored.

    Raises:
        EncodeError: the backend's serializer refuses the value; as in stock Celery, the
            run then fails with it (the caller stores FAILURE, the kernel dead-letters).
    """
    request = task.request
    ignored = get_actual_ignore_result(task, request)
    try:
        task.backend.mark_as_done(run_id, retval, request=request, store_result=not ignored)
    except EncodeError:
        raise
    except Exception as exc:  # the backend is down: the kernel's settle still records the run
        _not_stored(task, run_id, "SUCCESS", exc)


def store_retry(task: Any, run_id: str, exc: BaseException | None, einfo: ExceptionInfo) -> None:
    """RETRY with ``exc`` (what the run raised), when errors are stored."""
    if not _stores_errors(task, task.request):
        return
    try:
        task.backend.mark_as_retry(run_id, exc, einfo.traceback, request=task.request)
    except Exception as error:  # the backend is down: the kernel records the retry
        _not_stored(task, run_id, "RETRY", error)


def store_failure(task: Any, run_id: str, exc: BaseException, einfo: ExceptionInfo) -> None:
    """FAILURE with ``exc`` (as a type the caller can rebuild) and its traceback."""
    if not _stores_errors(task, task.request):
        return
    try:
        task.backend.mark_as_failure(
            run_id,
            get_pickleable_exception(exc),
            einfo.traceback,
            request=_chained(task.request, getattr(task.request, "kernel_chain", None)),
            call_errbacks=False,
        )
    except Exception as error:  # the backend is down: the kernel records the failure
        _not_stored(task, run_id, "FAILURE", error)


def store_chord_failure(app: Any, kernel: Any, occurrence_id: int, error_code: str) -> None:
    """FAILURE with ``ChordError`` for the body of the chord the run's end failed (its
    ``chord_failed`` events, one read: an outer chord it failed too), in the body task's
    backend (else the app's), for a group body each of its members with the member's own
    error, and the steps of a chain after the body; nothing when the end failed no chord."""
    # A chord that is (or ends) a chord's member fails that chord too: each one's body.
    for failed in kernel.events(occurrence_id=occurrence_id, types=["chord_failed"], limit=50):
        chord = failed.data
        task = app.tasks.get(chord["body_task"])
        backend = task.backend if task is not None else app.backend
        error = ChordError(f"Dependency {chord['member_task_id']} {_why(chord, error_code)}")
        # As Celery's backend: the errbacks it applies as a group are the body's children.
        errbacks = [app.AsyncResult(task_id) for task_id in chord.get("errback_task_ids", ())]
        request = None
        if errbacks:
            request = Context()
            request.children.append(app.GroupResult(uuid(), errbacks))
        try:
            backend.mark_as_failure(
                chord["body_task_id"], error, None, request=request, call_errbacks=False
            )
            if chord.get("body_task_ids"):
                # A group body's members each fail with the member's own error, as
                # Celery's backend fails them.
                meta = backend.get_task_meta(chord["member_task_id"])
                own = meta["result"] if meta.get("status") == "FAILURE" else error
                for body_id in chord["body_task_ids"]:
                    backend.mark_as_failure(body_id, own, None, call_errbacks=False)
            for step_id in chord.get("chain_task_ids", ()):  # as Celery's backend fails them
                backend.mark_as_failure(step_id, error, None, call_errbacks=False)
        except Exception as exc:  # the backend is down: the kernel has the chord's failure
            log.warning(
                "result backend: FAILURE of chord body %s (id %s) not stored: %s; the kernel "
                "has the chord's failure",
                chord["body_task"],
                chord["body_task_id"],
                exc,
                extra={"action": "result_not_stored", "task_id": chord["body_task_id"]},
            )


def store_end(
    app: Any, payload: Mapping[str, Any], body: Mapping[str, Any], skip_reason: str | None = None
) -> bool:
    """Store the end the kernel made of a routed run (its ``payload``; an owed row's
    ``body``: its ``trigger_key``, ``status``, ``error``; a skipped run's ``skip_reason``)
    under the caller's task id; whether it was stored (not when the call, else the task,
    ignores its results and the task does not store errors even so). A run skipped
    ``expired`` is REVOKED with ``TaskRevokedError('expired')``, as Celery's worker
    revokes an expired task.

    Raises:
        AdapterError: retryable ``RESULT_BACKEND_UNAVAILABLE``, the backend refused it.
    """
    task = app.tasks.get(payload["task"])
    given = payload.get("request") or {}
    call = Context(ignore_result=given["ignore_result"]) if "ignore_result" in given else None
    if task is not None and not _stores_errors(task, call):
        return False
    backend = app.backend if task is None else task.backend
    trigger_key = str(body["trigger_key"])
    run_id = caller_key(trigger_key) or trigger_key
    error = body.get("error") or {}
    code = str(error.get("code") or body["status"]).upper()
    message = error.get("message") or f"the run was {body['status']}"
    occurrence = f"occurrence {body['occurrence_id']} {body['status']}"
    try:
        if body["status"] == "dead_letter":
            failed = RunFailed(f"{occurrence}: {message}", code)
            chained = _chained(None, given.get("chain"))
            backend.mark_as_failure(run_id, failed, None, request=chained, call_errbacks=False)
        elif body["status"] == "skipped" and skip_reason == "expired":
            backend.mark_as_revoked(run_id, "expired")
        else:
            backend.mark_as_revoked(run_id, f"{occurrence} ({code}): {message}")
    except Exception as exc:
        raise AdapterError(
            "RESULT_BACKEND_UNAVAILABLE",
            f"the result backend did not take the end of task id {run_id}: {exc}",
            retryable=True,
        ) from exc
    return True


def _why(chord: Mapping[str, Any], error_code: str) -> str:
    """How the member failed its chord, in Celery's ``ChordError`` (``Dependency ID ...``):
    an expired member's words are Celery's for its revoked task."""
    if chord["reason"] == "cancelled":
        return "was cancelled"
    if chord["reason"] == "expired":
        return "raised TaskRevokedError('expired')"
    return f"raised {error_code}"


def _chained(request: Any, later: list[str] | None) -> Any:
    """``request`` (None: none) naming the chain's steps after it as Celery's
    ``request.chain`` (each step a signature Celery's backend reads the task id of)."""
    if not later:
        return request
    steps = [{"options": {"task_id": task_id}} for task_id in later]
    return Context(vars(request) if request is not None else {}, chain=steps)


def _stores_errors(task: Any, request: Any) -> bool:
    if get_actual_ignore_result(task, request):
        return bool(task.store_errors_even_if_ignored)
    return True


def _not_stored(task: Any, run_id: str, state: str, exc: Exception) -> None:
    log.warning(
        "result backend: %s of task %s (id %s) not stored: %s; the kernel has the run's outcome",
        state,
        task.name,
        run_id,
        exc,
        extra={"action": "result_not_stored", "task_id": run_id},
    )
