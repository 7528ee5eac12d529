"""Every message the kernel's glue sends a worker, in one place.

A message is only a hint: the kernel decides who runs what, and a lost or duplicated
message is repaired or refused there. ``run_occurrence`` hints carry one occurrence id,
or up to ``kernel_batch_max`` ids of one queue when that queue's backlog is deep
(:func:`publish_hints`); ``adjudicate_occurrence`` asks an adapter about an uncertain
run; ``notify`` delivers a notification, and a notification may name a task of the app.
Callers handle the broker being down (``kombu.exceptions.OperationalError``): the pump
sends a hint again after ``kernel_rehint_after``.

Beat loads this module: it imports no worker code (runtime, adapters).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from celery.utils.saferepr import saferepr

from beat_schedule.task_settings import broker_priority
from celery_app.task_names import ADJUDICATE_OCCURRENCE, NOTIFY, RUN_OCCURRENCE
from kernel import DispatchHint

__all__ = [
    "call_reprs",
    "publish_adjudication_hints",
    "publish_hints",
    "resend_run_hints",
    "send_notification_hint",
    "send_notification_task",
]

#: The kernel's own messages carry ids only: JSON whatever the app's task_serializer
#: (a pickle-only app still accepts JSON: doctor refuses an accept_content without it).
_KERNEL_SERIALIZER = "json"

#: Kinds whose job code runs in the worker's own process, where Celery's time limits
#: stop it; shell and http enforce their timeout themselves.
_TIME_LIMITED_KINDS = frozenset({"task", "callable"})
#: The hard time limit's margin over the soft one: time for the body to unwind and the
#: run to settle as TIMEOUT before Celery kills the process.
_HARD_LIMIT_MARGIN_S = 5.0
#: The longest args or kwargs text a hint shows monitors (Celery's own bound).
_REPR_MAX = 1024


def _time_limits(kind: str, timeout: float | None) -> dict[str, float]:
    """``send_task`` time limits enforcing a job's ``timeout`` (none for other kinds)."""
    if timeout is None or kind not in _TIME_LIMITED_KINDS:
        return {}
    return {"soft_time_limit": timeout, "time_limit": timeout + _HARD_LIMIT_MARGIN_S}


def publish_hints(
    app: Any,
    producer: Any,
    hints: list[DispatchHint],
    *,
    batch_max: int,
    hint_options: dict[str, dict[str, Any]],
    etas: Mapping[int, datetime] | None = None,
) -> None:
    """Send ``hints`` as ``run_occurrence`` messages, batching a queue's when it is deep.

    Only hints with nothing of their own in the message batch: no Celery time limit
    (one limit cannot time several runs) and no beat_schedule ``options``. A queue with
    more such hints than ``batch_max`` gets them in messages of at most ``batch_max`` ids
    (sizes evened out; one priority a message); otherwise each goes alone, so a single
    firing is never held back. A hint carries its run's priority as Celery's on the
    app's broker (:func:`~beat_schedule.task_settings.broker_priority`), so a Redis or
    RabbitMQ priority queue orders them as the kernel does. ``etas``: occurrence id ->
    the time a run held back (countdown/eta) may start, sent alone with Celery's ``eta``
    so the worker holds it until then, as it holds a stock Celery message.
    """
    batchable: dict[tuple[str, int | None], list[DispatchHint]] = {}
    for hint in hints:
        options = {**hint_options.get(hint.job_id, {}), **_time_limits(hint.kind, hint.timeout)}
        if etas and hint.occurrence_id in etas:
            options["eta"] = etas[hint.occurrence_id]
        priority = broker_priority(app.conf, hint.priority)
        if options:
            _send(app, producer, [hint], {**options, "priority": priority})
        else:
            batchable.setdefault((hint.queue, priority), []).append(hint)
    for (_, priority), queue_hints in batchable.items():
        count = len(queue_hints)
        messages = -(-count // batch_max) if count > batch_max else count
        for index in range(messages):
            _send(app, producer, queue_hints[index::messages], {"priority": priority})


def resend_run_hints(
    app: Any,
    occurrence_ids: list[int],
    *,
    queue: str,
    shadow: str | None,
    per_message: int,
    countdown: float | None = None,
) -> None:
    """Send a batch's unstarted ids again to ``queue``, ``per_message`` a message, under
    the batch's ``shadow`` name (so Flower still shows the job); ``countdown``: delivered
    so many seconds from now (a rate-limited run's, when its token is free)."""
    for start in range(0, len(occurrence_ids), per_message):
        app.send_task(
            RUN_OCCURRENCE,
            args=occurrence_ids[start : start + per_message],
            queue=queue,
            shadow=shadow,
            countdown=countdown,
            serializer=_KERNEL_SERIALIZER,
        )


def publish_adjudication_hints(app: Any, hints: list[DispatchHint]) -> None:
    """One ``adjudicate_occurrence`` message per occurrence whose adapter is to be asked."""
    with app.producer_or_acquire() as producer:
        for hint in hints:
            app.send_task(
                ADJUDICATE_OCCURRENCE,
                args=[hint.occurrence_id, hint.kind],
                queue=hint.queue,
                producer=producer,
                serializer=_KERNEL_SERIALIZER,
            )


def send_notification_hint(app: Any, notification_id: int, queue: str, countdown: float) -> None:
    """Ask a worker of ``queue`` to deliver the notification, ``countdown`` seconds from now."""
    app.send_task(
        NOTIFY,
        args=[notification_id],
        queue=queue,
        countdown=countdown or None,
        serializer=_KERNEL_SERIALIZER,
    )


def send_notification_task(app: Any, task_name: str, body: dict[str, Any]) -> None:
    """Deliver a notification whose target is a task of the app: the task gets ``body``."""
    app.send_task(task_name, kwargs={"notification": body}, queue=body.get("queue"))


def _send(app: Any, producer: Any, hints: list[DispatchHint], options: dict[str, Any]) -> None:
    jobs = {hint.job_id for hint in hints}
    app.send_task(
        RUN_OCCURRENCE,
        args=[hint.occurrence_id for hint in hints],
        queue=hints[0].queue,
        # Flower names a message by its shadow: the job, when the message has one.
        shadow=jobs.pop() if len(jobs) == 1 else None,
        producer=producer,
        **_call_reprs(hints),
        **{**options, "serializer": _KERNEL_SERIALIZER},
    )


def _call_reprs(hints: list[DispatchHint]) -> dict[str, str]:
    """A lone ``task`` run's hint shows monitors (Flower, the worker's task events) the
    task's own args and kwargs, as Celery's message would, not the occurrence id."""
    if len(hints) != 1 or hints[0].kind != "task" or hints[0].payload is None:
        return {}
    argsrepr, kwargsrepr = call_reprs(hints[0].payload)
    return {"argsrepr": argsrepr, "kwargsrepr": kwargsrepr}


def call_reprs(payload: Mapping[str, Any]) -> tuple[str, str]:
    """(argsrepr, kwargsrepr) of a ``task`` run, as Celery's logs and events show its call:
    those the call gave (Celery's ``argsrepr``/``kwargsrepr``, which keep secrets out of
    them), else its arguments cut short."""
    given = payload.get("request") or {}
    argsrepr, kwargsrepr = given.get("argsrepr"), given.get("kwargsrepr")
    return (
        saferepr(list(payload.get("args") or ()), _REPR_MAX) if argsrepr is None else argsrepr,
        saferepr(dict(payload.get("kwargs") or {}), _REPR_MAX)
        if kwargsrepr is None
        else kwargsrepr,
    )
