"""A task body run by the kernel, called as Celery's worker calls it.

The ``task`` adapter runs the app's task inside ``kernel.run_occurrence``; here the body
gets what it would get from Celery's tracer: ``self.request`` (id, retries, args, kwargs,
delivery_info, hostname ...), Celery's task signals sent by the app's task (not the
kernel's wrapper), ``self.retry()`` turned into a kernel retry after its countdown
or at its eta, ``self.replace(sig)`` (:func:`hook_replace`: the run's replacement made
durably by its settle), and its outcome in the app's result backend under
``self.request.id`` (:mod:`celery_app.task_results`).
"""

from __future__ import annotations

import sys
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, tzinfo
from typing import Any

from billiard.einfo import ExceptionInfo
from celery import signals, states
from celery.app.task import Context, Task
from celery.exceptions import Retry

from adapters.base import AdapterError, Cancelled, ExecutionContext, HandBack, Replaced
from adapters.task import retries_on
from celery_app.canvas_links import replacement_signature
from celery_app.enqueue_routing import routed_call
from celery_app.enqueueing import ACCUMULATE, with_settings
from celery_app.task_names import RUN_OCCURRENCE
from celery_app.task_results import store_failure, store_retry, store_success
from kernel import InvalidArgument, attempts_left, caller_key, replacement_of

__all__ = ["call_task", "hook_replace", "task_id"]

#: Task ids of kernel runs: one per occurrence, kept across its retries as Celery keeps a
#: retried task's id.
_RUN_IDS = uuid.UUID("5f0c5bd4-3a53-4c55-9d43-0f9b1e2b2a10")


def task_id(ctx: ExecutionContext) -> str:
    """The run's ``self.request.id``: an enqueued run's key, which a routed call made its
    task id (the id its caller's AsyncResult has); else (a Beat firing, an unkeyed enqueue)
    one derived from the occurrence."""
    occurrence = ctx.occurrence
    keyed = caller_key(occurrence.trigger_key)
    if keyed is not None:
        return keyed
    key = f"{occurrence.job_id}\n{occurrence.trigger_key}\n{occurrence.id}"
    return str(uuid.uuid5(_RUN_IDS, key))


def call_task(task: Any, ctx: ExecutionContext, run: Callable[[], Any]) -> Any:
    """Run the body (``run()``) of ``task`` for the occurrence of ``ctx``, as Celery would.

    Raises:
        AdapterError: retryable ``TASK_RETRY`` when the body raised ``self.retry()``.
        Exception: whatever the body raised otherwise.
    """
    occurrence = ctx.occurrence
    payload = occurrence.payload
    args, kwargs = list(payload.get("args") or ()), dict(payload.get("kwargs") or {})
    run_id = task_id(ctx)
    replaced = replacement_of(occurrence.trigger_key)
    # The hint's message as the worker got it (none when the body runs outside a worker).
    wrapper = task.app.tasks.get(RUN_OCCURRENCE)
    outer = wrapper.request if wrapper is not None else Context()
    task.push_request(
        id=run_id,
        correlation_id=run_id,
        root_id=run_id,
        parent_id=None,
        args=args,
        kwargs=kwargs,
        retries=occurrence.attempt - 1,
        delivery_info=outer.delivery_info,
        hostname=outer.hostname,
        reply_to=outer.reply_to,
        origin=outer.origin,
        headers=None,
        called_directly=False,
        kernel_run=True,  # hook_replace: this run's replace() is the kernel's
        replaced_task_nesting=replaced[1] if replaced else 0,
        # Celery's retry() sends a new message unless the run is eager; the kernel, not
        # the broker, owns this run's retry, so retry() only raises its Retry here.
        is_eager=True,
    )
    state, retval = states.SUCCESS, None
    try:
        signals.task_prerun.send(sender=task, task_id=run_id, task=task, args=args, kwargs=kwargs)
        try:
            retval = run()
            store_success(task, run_id, retval)
        except Retry as exc:
            state = states.RETRY
            _retried(task, run_id, exc, attempts_left(occurrence.attempt, occurrence.max_attempts))
            raise AdapterError(
                "TASK_RETRY",
                str(exc),
                retryable=True,
                retry_in=_seconds_until(exc.when, task.app.timezone),
            ) from None
        except Cancelled:
            state = states.REVOKED
            raise
        except Replaced:
            state = states.IGNORED  # as Celery's replace: no result, the replacement's
            raise
        except Exception as exc:
            retrying = retries_on(task, exc) and attempts_left(
                occurrence.attempt, occurrence.max_attempts
            )
            state = states.RETRY if retrying else states.FAILURE
            _failed(task, run_id, exc, args, kwargs, retrying)
            raise
        except HandBack:
            state = states.RETRY  # paused or handed back: the run goes on later
            raise
        signals.task_success.send(sender=task, result=retval)
        return retval
    finally:
        signals.task_postrun.send(
            sender=task,
            task_id=run_id,
            task=task,
            args=args,
            kwargs=kwargs,
            retval=retval,
            state=state,
        )
        task.pop_request()


_hook_lock = threading.Lock()


def replacement(app: Any, sig: Any) -> dict[str, Any]:
    """The kernel link of a kernel run's ``self.replace(sig)`` (Celery has frozen it with
    the run's task id), each task's settings with it.

    Raises:
        InvalidArgument: the kernel cannot make it durable: a task of it is not routed
            (``kernel_route_tasks``), or it has what a link cannot carry (named).
    """
    link = replacement_signature(sig)
    for name, kwargs in _tasks(link):
        # A group's replacement is Celery's chord over its own accumulate: routed with it.
        if name != ACCUMULATE and not routed_call(app, name, kwargs):
            raise InvalidArgument(
                "replacement",
                f"task {name} of the replacement is not routed through the kernel "
                "(kernel_route_tasks), which makes a kernel run's replacement durable: "
                "route it, or replace with routed tasks only",
                task=name,
            )
    return with_settings(app, [link])[0]


def _tasks(link: Any) -> list[tuple[str, Any]]:
    """(task name, kwargs) of every signature in a kernel link, at any depth."""
    found = [(link["task"], link.get("kwargs"))]
    for member in (link.get("chord") or {}).get("header") or ():
        found += _tasks(member)
    for nested in (*link.get("callbacks", ()), *link.get("errbacks", ())):
        found += _tasks(nested)
    return found


def hook_replace() -> None:
    """``self.replace(sig)`` inside a kernel run ends the body as Celery's replace does
    (no result: Ignore), whether it returns or raises ``self.replace(...)``: the run's
    settle makes the replacement in its transaction, the step Celery gave the run's task
    id taking over that id, the run's callbacks, chain's rest and chord place
    (:meth:`kernel.Kernel.replace`). A replacement the kernel cannot make durable fails
    the run, naming why. Elsewhere Celery's own. Idempotent."""
    with _hook_lock:
        if getattr(Task.on_replace, "_kernel_run", False):
            return
        celerys = Task.on_replace

        def on_replace(self: Any, sig: Any) -> Any:
            if not getattr(self.request, "kernel_run", False):
                return celerys(self, sig)
            raise Replaced(replacement(self.app, sig), self.request.id)

        on_replace._kernel_run = True  # type: ignore[attr-defined]
        Task.on_replace = on_replace


def _retried(task: Any, run_id: str, retry: Retry, retrying: bool) -> None:
    """``self.retry()``: RETRY while the kernel has attempts left, else the run's last
    attempt ends as a failure with what the body retried on."""
    einfo = ExceptionInfo()
    if retrying:
        store_retry(task, run_id, retry.exc, einfo)
    else:
        store_failure(task, run_id, retry.exc or retry, einfo)
    signals.task_retry.send(sender=task, request=task.request, reason=retry, einfo=einfo)


def _failed(
    task: Any, run_id: str, exc: Exception, args: list[Any], kwargs: dict[str, Any], retrying: bool
) -> None:
    einfo = ExceptionInfo(sys.exc_info())
    if retrying:  # autoretry_for: Celery's own retry would send task_retry
        store_retry(task, run_id, exc, einfo)
        signals.task_retry.send(sender=task, request=task.request, reason=exc, einfo=einfo)
        return
    store_failure(task, run_id, exc, einfo)
    signals.task_failure.send(
        sender=task,
        task_id=run_id,
        exception=exc,
        args=args,
        kwargs=kwargs,
        traceback=einfo.tb,
        einfo=einfo,
    )


def _seconds_until(when: Any, zone: tzinfo) -> float | None:
    """Retry's ``when``: a countdown in seconds or an eta (a datetime or ISO text; a naive
    one is in the app's zone, as Celery reads it)."""
    if when is None:
        return None
    if isinstance(when, str):
        when = datetime.fromisoformat(when)
    if isinstance(when, datetime):
        eta = when if when.tzinfo is not None else when.replace(tzinfo=zone)
        seconds = (eta - datetime.now(UTC)).total_seconds()
    else:
        seconds = float(when)
    return max(0.0, seconds)
