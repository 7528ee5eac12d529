"""A task body run by the kernel, called as Celery's worker calls it.

The ``task`` adapter runs the app's task inside ``kernel.run_occurrence``; here the body
gets what it would get from Celery's tracer: ``self.request`` (id, retries, args, kwargs,
delivery_info, hostname ...), Celery's task signals sent by the app's task (not the
kernel's wrapper), ``self.retry()`` turned into a kernel retry after its countdown
or at its eta with the arguments it gives, ``self.replace(sig)`` (the run's replacement
made durably by its settle; both :func:`hook_task_methods`, which ``install(app)`` calls
at start-up: a prefork pool process inherits the hooked ``Task`` when it is forked), and
its outcome in the app's result backend under ``self.request.id`` (:mod:`celery_app.task_results`).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, tzinfo
from typing import Any

from billiard.einfo import ExceptionInfo
from celery import signals, states
from celery._state import _task_stack
from celery.app.task import Context, Task
from celery.exceptions import Reject, Retry

from adapters.base import AdapterError, Cancelled, ExecutionContext, HandBack, Redeliver, Replaced
from adapters.task import arguments, retries_on
from celery_app.canvas_growth import add_member
from celery_app.canvas_links import replacement_signature
from celery_app.enqueue_routing import routed_call
from celery_app.enqueueing import ACCUMULATE, RunFailed, with_settings
from celery_app.errbacks import HEADER
from celery_app.hints import run_task_id
from celery_app.task_names import RUN_OCCURRENCE
from celery_app.task_results import store_failure, store_retry, store_success
from kernel import InvalidArgument, attempts_left, replacement_of

__all__ = ["call_task", "hook_task_methods", "task_id"]


def task_id(ctx: ExecutionContext) -> str:
    """The run's ``self.request.id`` (:func:`celery_app.hints.run_task_id`)."""
    occurrence = ctx.occurrence
    return run_task_id(occurrence.job_id, occurrence.trigger_key, occurrence.id)


def call_task(task: Any, ctx: ExecutionContext, run: Callable[[], Any]) -> Any:
    """Run the body (``run()``) of ``task`` for the occurrence of ``ctx``, as Celery would.

    Raises:
        AdapterError: retryable ``TASK_RETRY`` when the body raised ``self.retry()``.
        Exception: whatever the body raised otherwise.
    """
    occurrence = ctx.occurrence
    payload = occurrence.payload
    args, kwargs = arguments(payload.get("args") or (), payload.get("kwargs") or {})
    run_id = task_id(ctx)
    replaced = replacement_of(occurrence.trigger_key)
    # The hint's message as the worker got it (none when the body runs outside a worker).
    wrapper = task.app.tasks.get(RUN_OCCURRENCE)
    outer = wrapper.request if wrapper is not None else Context()
    given = payload.get("request") or {}
    run = _errback_call(task, given, args, kwargs) or run
    task.push_request(
        **{
            # What the call's message set first: the kernel's own fields win over a header
            # of the same name (a routed call refuses one; a job file may hold one).
            **_celery_request(given, outer, run_id),
            "id": run_id,
            "correlation_id": run_id,
            # As Celery's message: the call's (a link's: its parent's), the root its own id
            # at the top.
            "root_id": given.get("root_id") or run_id,
            "parent_id": given.get("parent_id"),
            "eta": _eta(occurrence, task.app.timezone),
            "group": given.get("group_id"),
            "group_index": given.get("group_index"),
            "args": args,
            "kwargs": kwargs,
            "retries": occurrence.attempt - 1,
            # A run handed back (Reject(requeue=True)) comes back as Celery's redelivery.
            "delivery_info": {**(outer.delivery_info or {}), "redelivered": True}
            if ctx.redelivered
            else outer.delivery_info,
            "hostname": outer.hostname,
            "reply_to": outer.reply_to,
            "origin": outer.origin,
            "called_directly": False,
            "kernel_run": True,  # hook_task_methods: its retry() and replace() are the kernel's
            "kernel_chain": given.get("chain"),  # task_results.store_failure
            "replaced_task_nesting": replaced[1] if replaced else 0,
            "is_eager": False,
        }
    )
    # As Celery's Context: the custom headers alone (not the kernel's own fields above).
    task.request.headers = given.get("headers")
    # As Celery's tracer: the body's task is the current one, so a call it makes names it
    # its parent (and a result it applies is among its children).
    _task_stack.push(task)
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
                retry_with=_new_arguments(exc, args, kwargs),
            ) from None
        except Cancelled:
            state = states.REVOKED
            raise
        except Replaced:
            state = states.IGNORED  # as Celery's replace: no result, the replacement's
            raise
        except Exception as exc:
            if isinstance(exc, Reject) and exc.requeue:
                # Celery's worker requeues the message: no failure, nothing stored.
                state = states.REJECTED
                raise Redeliver() from None
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
        _task_stack.pop()
        task.pop_request()


def _eta(occurrence: Any, zone: tzinfo) -> str | None:
    """Celery's ``request.eta`` of a run made to start later than it was made (a
    ``countdown`` or ``eta``): that instant, ISO text in the app's zone; else None."""
    if occurrence.scheduled_for <= occurrence.created_at:
        return None
    return str(occurrence.scheduled_for.astimezone(zone).isoformat())


def _errback_call(
    task: Any, given: Mapping[str, Any], args: Sequence[Any], kwargs: Mapping[str, Any]
) -> Callable[[], Any] | None:
    """The call of a marked errback run's body (``given``: its request fields; ``args``:
    the failed task id, then its own): ``body(request, exc, traceback, *own)``; None for
    any other run."""
    if not (given.get("headers") or {}).get(HEADER) or not args:
        return None
    failed_id, own = str(args[0]), list(args[1:])
    failed = task.app.AsyncResult(failed_id)
    if failed.state == states.FAILURE:
        exc, traceback = failed.result, failed.traceback
    else:
        exc = RunFailed(
            f"task {failed_id} failed; the result backend holds no exception of it",
            "DEAD_LETTER",
        )
        traceback = None
    request = Context(id=failed_id, root_id=failed_id, errbacks=None)
    body = getattr(task, "_orig_run", task.run)
    return lambda: body(request, exc, traceback, *own, **kwargs)


def _celery_request(given: dict[str, Any], outer: Any, run_id: str) -> dict[str, Any]:
    """The request fields a routed call's message set (its ``TaskRequest``, stored with the
    run), as Celery's worker makes them of its message: each custom header a field of its
    own, the time limits as its ``timelimit`` pair, the call's properties over the hint
    message's, and the call's ``ignore_result`` only when it gave one (else the task's)."""
    fields = {
        **(given.get("headers") or {}),
        "timelimit": [given.get("time_limit"), given.get("soft_time_limit")],
        "properties": {
            **(outer.properties or {}),
            "correlation_id": run_id,
            **(given.get("properties") or {}),
        },
        "argsrepr": given.get("argsrepr"),
        "kwargsrepr": given.get("kwargsrepr"),
        "stamped_headers": given.get("stamped_headers"),
        "stamps": given.get("stamps") or {},
    }
    if "ignore_result" in given:
        fields["ignore_result"] = given["ignore_result"]
    return fields


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
    for nested in (*link.get("callbacks", ()), *link.get("errbacks", ()), *link.get("rest", ())):
        found += _tasks(nested)
    return found


def hook_task_methods() -> None:
    """``self.replace(sig)``, ``self.retry()`` and ``self.add_to_chord(sig)`` inside a
    kernel run; elsewhere Celery's own. Idempotent.

    ``replace``: the body ends as Celery's replace ends it (no result: Ignore), whether it
    returns or raises ``self.replace(...)``; the run's settle makes the replacement in its
    transaction, the step Celery gave the run's task id taking over that id, the run's
    callbacks, chain's rest and chord place (:meth:`kernel.Kernel.replace`). A
    replacement the kernel cannot make durable fails the run, naming why.

    ``retry``: Celery's, which builds the retry's signature (its arguments) and raises
    ``Retry``, but sends nothing: the kernel, not the broker, owns this run's retry.
    Celery's retry sends unless the run is eager, so it is told so for that call only;
    the body itself sees ``is_eager`` False, as under a worker.

    ``add_to_chord``: the routed task is added to the run's chord, fenced, in one
    transaction (:func:`celery_app.canvas_growth.add_member`).
    """
    if getattr(Task.retry, "_kernel_run", False):
        return
    with _hook_lock:
        if getattr(Task.retry, "_kernel_run", False):
            return
        celerys_replace, celerys_retry = Task.on_replace, Task.retry
        celerys_add = Task.add_to_chord

        def on_replace(self: Any, sig: Any) -> Any:
            if not getattr(self.request, "kernel_run", False):
                return celerys_replace(self, sig)
            raise Replaced(replacement(self.app, sig), self.request.id)

        def retry(self: Any, *args: Any, **kwargs: Any) -> Any:
            request = self.request
            if not getattr(request, "kernel_run", False):
                return celerys_retry(self, *args, **kwargs)
            request.is_eager = True
            try:
                return celerys_retry(self, *args, **kwargs)
            finally:
                request.is_eager = False

        def add_to_chord(self: Any, sig: Any, lazy: bool = False) -> Any:
            if not getattr(self.request, "kernel_run", False):
                return celerys_add(self, sig, lazy)
            return add_member(self, sig, lazy)

        retry.__doc__ = celerys_retry.__doc__
        retry._kernel_run = True  # type: ignore[attr-defined]
        Task.on_replace = on_replace
        Task.retry = retry
        Task.add_to_chord = add_to_chord


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


def _new_arguments(retry: Retry, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The arguments of Celery's retry signature (Celery's merge of the old ones and those
    ``retry(args=..., kwargs=...)`` gave) when they differ from the run's, else None."""
    sig = retry.sig
    if sig is None:
        return None
    new = {"args": list(sig.args or ()), "kwargs": dict(sig.kwargs or {})}
    return None if new == {"args": args, "kwargs": kwargs} else new


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
