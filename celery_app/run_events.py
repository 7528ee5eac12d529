"""Celery task events for each run of a batch, so that Flower lists each under its job's name.

A hint carrying several occurrences is one Celery message, and Celery's own task events
describe that message (so does a hint sent without its job's name: the rest of a long
batch, sent again). When the worker sends task events (``-E``, or Flower's
``enable_events``), the main process marks each batch's request as it arrives
(:func:`mark_batch`), and the pool process then sends, per run, the events Flower builds
a task from: ``task-received`` and ``task-started`` when the run's claim is made,
``task-succeeded`` or ``task-failed`` when it ended, each named by the run's job and
with the run's task id (:func:`celery_app.hints.run_task_id`, a routed call's own).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from celery.signals import task_received
from celery.utils.saferepr import saferepr

from celery_app.hints import call_reprs, run_task_id
from celery_app.runtime import RunOutcome
from kernel import Claim

__all__ = ["BATCH_EVENTS", "RunEvents", "connect", "run_events"]

#: The request header that tells the pool process to send each run's events.
BATCH_EVENTS = "kernel_run_events"
#: The longest args, kwargs or result text an event carries (Celery's own bound).
_REPR_MAX = 1024


def connect(task_name: str) -> None:
    """Mark the batches of ``task_name`` as they reach the main process."""

    def mark_batch(request: Any, **_: Any) -> None:
        if request.type != task_name:
            return
        # One id under its job's name (the pump's shadow) is named by Celery's own events;
        # several, or one sent again without a name (a long batch's rest), need the runs'.
        if len(request.args or ()) < 2 and request.name != task_name:
            return
        eventer = request.eventer
        if (
            eventer is not None
            and eventer.enabled
            and (not eventer.groups or "task" in eventer.groups)
        ):
            request.request_dict[BATCH_EVENTS] = True

    task_received.connect(mark_batch, weak=False)


class RunEvents:
    """The events of one batch's runs, sent through ``dispatcher``."""

    def __init__(self, dispatcher: Any) -> None:
        self.dispatcher = dispatcher
        self._started: dict[int, tuple[str, float]] = {}  # occurrence id -> task id, start

    def started(self, claim: Claim) -> None:
        occurrence = claim.occurrence
        uuid = run_task_id(occurrence.job_id, occurrence.trigger_key, occurrence.id)
        self._started[occurrence.id] = (uuid, time.monotonic())
        # A task's own call, as Celery's events show it; else the occurrence.
        args, kwargs = (
            call_reprs(occurrence.payload)
            if occurrence.kind == "task"
            else (f"[{occurrence.id}]", "{}")
        )
        self.dispatcher.send(
            "task-received",
            uuid=uuid,
            name=occurrence.job_id,
            args=args,
            kwargs=kwargs,
            retries=max(claim.occurrence.attempt - 1, 0),
        )
        self.dispatcher.send("task-started", uuid=uuid)

    def ended(self, occurrence_id: int, outcome: RunOutcome) -> None:
        started = self._started.pop(occurrence_id, None)
        if started is None:
            return  # never claimed here: nothing was announced
        uuid, began = started
        if outcome.error_code is None:
            runtime = time.monotonic() - began
            result = saferepr(outcome.value, _REPR_MAX)
            self.dispatcher.send("task-succeeded", uuid=uuid, result=result, runtime=runtime)
            return
        failure = outcome.failure(occurrence_id)
        self.dispatcher.send(
            "task-failed", uuid=uuid, exception=f"OccurrenceFailed({failure!r})", traceback=""
        )


#: An unmarked hint's (nearly every one's): reused, no generator made per run.
_NO_EVENTS: AbstractContextManager[None] = nullcontext()


def run_events(task: Any) -> AbstractContextManager[RunEvents | None]:
    """A context giving the batch's :class:`RunEvents` when the main process marked it,
    else None."""
    request = task.request
    if not getattr(request, BATCH_EVENTS, False):
        return _NO_EVENTS
    return _dispatching(task.app, request.hostname)


@contextmanager
def _dispatching(app: Any, hostname: str) -> Iterator[RunEvents]:
    with app.events.default_dispatcher(hostname=hostname) as dispatcher:
        yield RunEvents(dispatcher)
