"""Every message the kernel's glue sends a worker, in one place.

A message is only a hint: the kernel decides who runs what, and a lost or duplicated
message is repaired or refused there. ``run_occurrence`` hints carry one occurrence id,
or up to ``kernel_batch_max`` ids of one queue when that queue's backlog is deep
(:func:`publish_hints`), or an ``enqueue_many`` batch's ids of one queue, which the worker
process taking it splits (:func:`split_hint`); a hint of one run is that run's Celery
message as monitors see it: its id is the run's task id (:func:`run_task_id`) and, for an
enqueued run, its shadow is the task's name. ``adjudicate_occurrence`` asks an adapter
about an uncertain run; ``notify`` delivers a notification, and a notification may name a
task of the app.
Callers handle the broker being down (``kombu.exceptions.OperationalError``): the pump
sends a hint again after ``kernel_rehint_after``.

Beat loads this module: it imports no worker code (runtime, adapters).
"""

from __future__ import annotations

import inspect
import logging
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from celery import Celery
from celery.app.amqp import AMQP
from celery.utils.saferepr import saferepr
from kombu.messaging import Producer

from beat_schedule.task_settings import broker_priority
from celery_app.task_names import ADJUDICATE_OCCURRENCE, NOTIFY, RUN_OCCURRENCE
from kernel import DispatchHint, caller_key, task_job_id

__all__ = [
    "call_reprs",
    "made_runs_publisher",
    "publish_adjudication_hints",
    "publish_hints",
    "resend_run_hints",
    "run_task_id",
    "send_notification_hint",
    "send_notification_task",
    "split_hint",
    "worker_shares",
]

log = logging.getLogger(__name__)

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
#: Task ids of kernel runs: one per occurrence, kept across its retries and its hints, as
#: Celery keeps a retried task's id.
_RUN_IDS = uuid.UUID("5f0c5bd4-3a53-4c55-9d43-0f9b1e2b2a10")
#: Names Celery's ``send_task`` reads as its own options (its parameters, the message's,
#: the route's ``queue``, kombu's ``publish``): a stamp so named would set one of them
#: instead of being a stamp of the hint (the run's own request keeps it).
_SEND_TASK_NAMES = frozenset(
    {"queue", *inspect.signature(Celery.send_task).parameters,
     *inspect.signature(AMQP.as_task_v2).parameters,
     *inspect.signature(Producer.publish).parameters}
)  # fmt: skip


def run_task_id(job_id: str, trigger_key: str, occurrence_id: int) -> str:
    """A run's Celery task id: its body's ``self.request.id`` and the id of each hint of it
    alone. An enqueued run's key, which a routed call made its task id (the id its caller's
    AsyncResult has); else (a Beat firing, an unkeyed enqueue) one derived from the
    occurrence."""
    keyed = caller_key(trigger_key)
    if keyed is not None:
        return keyed
    return str(uuid.uuid5(_RUN_IDS, f"{job_id}\n{trigger_key}\n{occurrence_id}"))


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
    split_by_worker: bool = False,
) -> None:
    """Send ``hints`` as ``run_occurrence`` messages, batching a queue's when it is deep.

    Only hints with nothing of their own in the message batch: no Celery time limit
    (one limit cannot time several runs), no stamps and no beat_schedule ``options``. A queue with
    more such hints than ``batch_max`` gets them in messages of at most ``batch_max`` ids
    (sizes evened out; one priority a message); otherwise each goes alone, so a single
    firing is never held back. A hint carries its run's priority as Celery's on the
    app's broker (:func:`~beat_schedule.task_settings.broker_priority`), so a Redis or
    RabbitMQ priority queue orders them as the kernel does. ``etas``: occurrence id ->
    the time a run held back (countdown/eta) may start, sent alone with Celery's ``eta``
    so the worker holds it until then, as it holds a stock Celery message.
    ``split_by_worker``: a deep queue's batchable hints go as one message (one publish,
    for an ``enqueue_many`` caller), which the worker that takes it splits into shares of
    at most ``batch_max`` (:func:`split_hint`).
    """
    batchable: dict[tuple[str, int | None], list[DispatchHint]] = {}
    priorities: dict[int, int | None] = {}  # read from the app's conf once a priority
    for hint in hints:
        options = {
            **hint_options.get(hint.job_id, {}),
            **_time_limits(hint.kind, hint.timeout),
            **_stamps(hint),
        }
        if etas and hint.occurrence_id in etas:
            options["eta"] = etas[hint.occurrence_id]
        if hint.priority not in priorities:
            priorities[hint.priority] = broker_priority(app.conf, hint.priority)
        priority = priorities[hint.priority]
        if options:
            _send(app, producer, [hint], {**options, "priority": priority})
        else:
            batchable.setdefault((hint.queue, priority), []).append(hint)
    for (_, priority), queue_hints in batchable.items():
        count = len(queue_hints)
        messages = -(-count // batch_max) if count > batch_max else count
        if split_by_worker and count > batch_max:
            messages = 1
        for index in range(messages):
            _send(app, producer, queue_hints[index::messages], {"priority": priority})


#: A worker passes a hint's rest on in at most this many messages (one above
#: ``batch_max`` ids is split again by the process that takes it): no process spends
#: long publishing before it runs its own share, however big the batch.
_SPLIT_FANOUT = 16


def made_runs_publisher(
    app: Any, *, batch_max: int, rehint_after: float
) -> Callable[[list[DispatchHint]], None]:
    """The kernel's ``on_runs_made`` for this app: a committed settle's chain step, chord
    body or errback published at once, as a stock worker sends a chain's next task, rather
    than at Beat's next tick. The settle stands whatever happens here: a hint not sent
    (the broker down, anything else) is the pump's after ``rehint_after``."""

    def publish(hints: list[DispatchHint]) -> None:
        try:
            with app.producer_or_acquire() as producer:
                publish_hints(app, producer, hints, batch_max=batch_max, hint_options={})
        except Exception as exc:  # the settle committed: nothing here may undo or hide it
            log.warning(
                "%d run(s) a settle made are stored; Beat hints them after %gs (%s)",
                len(hints),
                rehint_after,
                exc,
                extra={"action": "made_hint_deferred"},
            )

    return publish


def worker_shares(occurrence_ids: list[int], batch_max: int) -> tuple[list[int], list[list[int]]]:
    """A hint's ids split as the worker that takes it does: its own share (at most
    ``batch_max``, the shares evened out) and the rest in messages of even sizes, at most
    :data:`_SPLIT_FANOUT` of them; nothing passed on when the hint is not above
    ``batch_max``. Order is kept: older ids run first."""
    count = len(occurrence_ids)
    if count <= batch_max:
        return occurrence_ids, []
    own = -(-count // -(-count // batch_max))
    rest = occurrence_ids[own:]
    messages = min(-(-len(rest) // batch_max), _SPLIT_FANOUT)
    size, longer = divmod(len(rest), messages)
    pieces, start = [], 0
    for index in range(messages):
        end = start + size + (index < longer)
        pieces.append(rest[start:end])
        start = end
    return occurrence_ids[:own], pieces


def split_hint(
    app: Any,
    occurrence_ids: list[int],
    *,
    batch_max: int,
    queue: str,
    priority: int | None,
    shadow: str | None,
) -> list[int]:
    """The ids of a hint above ``batch_max`` this process runs; the others are published
    again to ``queue`` with the hint's ``priority`` and ``shadow`` (:func:`worker_shares`),
    on one producer, so the worker's other processes and other workers share them.
    Raises kombu's ``OperationalError`` with the broker down (the ids passed on stay
    queued, for the pump to hint again after ``kernel_rehint_after``)."""
    own, pieces = worker_shares(occurrence_ids, batch_max)
    if pieces:
        with app.producer_or_acquire() as producer:
            for piece in pieces:
                app.send_task(
                    RUN_OCCURRENCE,
                    args=piece,
                    queue=queue,
                    shadow=shadow,
                    priority=priority,
                    producer=producer,
                    serializer=_KERNEL_SERIALIZER,
                    add_to_parent=False,  # a hint is no child of the task sending it
                )
    return own


def resend_run_hints(
    app: Any,
    occurrence_ids: list[int],
    *,
    queue: str,
    shadow: str | None,
    per_message: int,
    countdown: float | None = None,
    task_id: str | None = None,
    stamps: Mapping[str, Any] | None = None,
) -> None:
    """Send a batch's unstarted ids again to ``queue``, ``per_message`` a message, under
    the batch's ``shadow`` name (so Flower still shows the job); ``countdown``: delivered
    so many seconds from now (a rate-limited run's, when its token is free); ``task_id``:
    the message's id (one run's hint sent again keeps its run's task id); ``stamps``: its
    request's ``stamped_headers`` and ``stamps``, which it keeps too."""
    for start in range(0, len(occurrence_ids), per_message):
        app.send_task(
            RUN_OCCURRENCE,
            args=occurrence_ids[start : start + per_message],
            queue=queue,
            shadow=shadow,
            countdown=countdown,
            task_id=task_id,
            serializer=_KERNEL_SERIALIZER,
            add_to_parent=False,  # a hint is no child of the task sending it
            **stamp_options(stamps or {}),
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
    ids = [hint.occurrence_id for hint in hints]
    app.send_task(
        RUN_OCCURRENCE,
        args=ids,
        queue=hints[0].queue,
        shadow=_shadow(hints),
        producer=producer,
        # A hint is no child of the task that sends it (a routed call adds its own result).
        add_to_parent=False,
        **_run_identity(hints, ids),
        **{**options, "serializer": _KERNEL_SERIALIZER},
    )


def _stamps(hint: DispatchHint) -> dict[str, Any]:
    """A ``task`` run's stamps as its hint's ``send_task`` options: its hint's headers
    carry them as its stock message's would (Celery's publish signals, ``task_received``'s
    ``request.stamps``, a revoke by stamped headers); a stamped run's hint goes alone."""
    return stamp_options((hint.payload or {}).get("request") or {}) if hint.kind == "task" else {}


def stamp_options(given: Mapping[str, Any]) -> dict[str, Any]:
    """Request fields' stamps (``stamped_headers`` and ``stamps``) as ``send_task`` options:
    ``stamped_headers`` and each stamp by its name."""
    stamps = {
        name: value
        for name, value in (given.get("stamps") or {}).items()
        if name in (given.get("stamped_headers") or ()) and name not in _SEND_TASK_NAMES
    }
    return {"stamped_headers": list(stamps), **stamps} if stamps else {}


def _shadow(hints: list[DispatchHint]) -> str | None:
    """The name monitors show for the message (Flower names a message by its shadow): a
    task's own name for an enqueued run of it, as its stock message has; else the job,
    when the message has one."""
    jobs = {hint.job_id for hint in hints}
    if len(jobs) != 1:
        return None
    job_id = jobs.pop()
    task = (hints[0].payload or {}).get("task") if hints[0].kind == "task" else None
    return task if isinstance(task, str) and job_id == task_job_id(task) else job_id


def _run_identity(hints: list[DispatchHint], ids: list[int]) -> dict[str, str]:
    """A lone run's hint is its run's Celery message as monitors see it: its id is the
    run's task id (Celery's publish signals, task-sent, task_received, the worker's state
    and Flower show the id the caller's AsyncResult has, kept across the run's hints), and
    a ``task`` run's hint shows its own args and kwargs, not the occurrence id. A batch's
    shows its ``ids``, as Celery's ``saferepr`` would."""
    if len(hints) != 1:
        return {"argsrepr": _shown(ids)}
    hint = hints[0]
    identity = {}
    if hint.trigger_key:
        identity["task_id"] = run_task_id(hint.job_id, hint.trigger_key, hint.occurrence_id)
    if hint.kind == "task" and hint.payload is not None:
        identity["argsrepr"], identity["kwargsrepr"] = call_reprs(hint.payload)
    return identity


def call_reprs(payload: Mapping[str, Any]) -> tuple[str, str]:
    """(argsrepr, kwargsrepr) of a ``task`` run, as Celery's logs and events show its call:
    those the call gave (Celery's ``argsrepr``/``kwargsrepr``, which keep secrets out of
    them), else its arguments cut short."""
    given = payload.get("request") or {}
    argsrepr, kwargsrepr = given.get("argsrepr"), given.get("kwargsrepr")
    return (
        _shown(list(payload.get("args") or ())) if argsrepr is None else argsrepr,
        _shown(dict(payload.get("kwargs") or {})) if kwargsrepr is None else kwargsrepr,
    )


#: Types Celery's ``saferepr`` shows as their ``repr`` (a number as its ``str``, the same).
_REPR_PLAIN = frozenset({int, float, bool, type(None)})
#: The most items of a list ``saferepr`` can show within ``_REPR_MAX`` (each takes three
#: characters at least, with its ``", "``); those after change nothing it shows.
_REPR_ITEMS = _REPR_MAX // 3 + 1


def _shown(call: list[Any] | dict[str, Any]) -> str:
    """``saferepr(call, _REPR_MAX)``. Most calls' arguments are numbers, None and short
    plain strings, one level deep: their ``repr``, when it fits, is the same text for a
    fraction of saferepr's cost (a few µs of every hint's; ``test_hints_reprs.py``)."""
    values, keys = (call.values(), call.keys()) if type(call) is dict else (call, ())
    if all(type(v) in _REPR_PLAIN or (type(v) is str and _quoted_as_is(v)) for v in values) and (
        all(type(k) is str and _quoted_as_is(k) for k in keys)
    ):
        text = repr(call)
        if len(text) <= _REPR_MAX:
            return text
    if type(call) is list:  # saferepr walks every item, ~0.4 ms for a batch's 500 ids
        call = call[:_REPR_ITEMS]
    shown: str = saferepr(call, _REPR_MAX)
    return shown


def _quoted_as_is(text: str) -> bool:
    """Whether ``repr`` shows ``text`` as saferepr does: in single quotes, nothing escaped."""
    return text.isprintable() and "'" not in text and "\\" not in text
