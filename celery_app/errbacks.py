"""Celery's two calls of an errback, made of the kernel's one durable errback run.

Celery (``Backend._call_task_errbacks``) calls an errback whose task takes more than one
argument as ``errback(request, exc, traceback)``: a function call inside the worker whose
task failed, lost with it. Any other it sends as a task, ``errback(task_id)``. Through the
kernel both are occurrences made in the transaction of the dead letter or of the chord's
failure, whoever makes it (a worker, Beat's lease expiry, an operator), the failed task id
their first argument: the new style outlives the process that failed. Such a run carries
the request header :data:`HEADER` (:func:`marked`); its worker
(:func:`celery_app.task_call.call_task`) calls the body with the failed task's request
rebuilt (its id) and what Celery passes, the exception and traceback the result backend
holds under that id, else :class:`~celery_app.enqueueing.RunFailed` saying it holds none
(a task whose results are ignored; an end the kernel made that no worker has stored yet).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from celery.utils.functional import arity_greater

__all__ = ["HEADER", "marked"]

#: The request header of an errback run called Celery's new way.
HEADER = "kernel_errback"


def marked(app: Any, sig: Mapping[str, Any]) -> Mapping[str, Any]:
    """An errback's kernel link, marked when Celery would call it ``errback(request, exc,
    traceback)``: its task's header (not a bound task's) takes more than one argument
    besides the arguments a mutable signature stores (Celery's test). An immutable one
    Celery calls with its own arguments alone, as the kernel runs it unmarked."""
    name = sig.get("task")
    task = app.tasks.get(name) if isinstance(name, str) and not sig.get("immutable") else None
    header = getattr(task, "__header__", None)
    if header is None or isinstance(header, partial) or not _takes_more(header, sig):
        return sig
    request = dict(sig.get("request") or {})
    return {**sig, "request": {**request, "headers": {**(request.get("headers") or {}), HEADER: 1}}}


def _takes_more(header: Any, sig: Mapping[str, Any]) -> bool:
    """Whether ``header`` takes more than one argument after the signature's own."""
    args, kwargs = sig.get("args") or (), sig.get("kwargs") or {}
    try:
        return bool(arity_greater(partial(header, *args, **kwargs), 1))
    except (TypeError, ValueError):  # stored arguments the task cannot take: as Celery
        return bool(arity_greater(header, 1))
