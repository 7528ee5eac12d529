"""Durable enqueue: any task's run through the kernel, idempotent by key, optionally in
the caller's own database transaction (issue 27).

``enqueue(app, "myproj.send_invoice", [order_id], key=f"invoice-{order_id}")`` makes an
occurrence of the task's implicit job ``task:myproj.send_invoice`` (its settings from
the task's own options, as for a ``beat_schedule`` entry) and publishes its hint; a
worker claims and runs it like any other occurrence. With ``connection=`` the
occurrence is inserted in that transaction and its hint follows the commit: at once
through Django's ``on_commit`` for a Django connection, else by Beat's dispatch pump.

``my_task.kernel.delay(...)`` / ``.apply_async(...)`` do the same for one task, and
``kernel_route_tasks`` (glob patterns) sends matching tasks' plain ``.delay()`` /
``.apply_async()`` through the kernel (:mod:`celery_app.enqueue_routing`). ``result(app,
occurrence_id)`` waits for the settle and returns the stored result: no Celery
result backend is needed.
"""

from __future__ import annotations

import difflib
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kombu.exceptions import OperationalError

from beat_schedule.routing import routed_by_name, routed_queue
from beat_schedule.task_settings import task_fields
from celery_app.config import ensure_broker_folders, open_kernel
from celery_app.errbacks import marked
from celery_app.hints import publish_hints
from celery_app.settings import KernelSettings
from kernel import (
    SETTLED,
    DispatchHint,
    Enqueued,
    EnqueueRequest,
    InvalidArgument,
    Kernel,
    KernelError,
    NotFound,
    OccurrenceStatus,
)

__all__ = [
    "ACCUMULATE",
    "ResultTimeout",
    "add_to_chord",
    "RunFailed",
    "enqueue",
    "enqueue_many",
    "enqueue_on",
    "process_kernel",
    "result",
    "with_settings",
]

log = logging.getLogger("celery_kernel.enqueue")

#: The parameters of one run in :func:`enqueue_many`'s list, besides ``task``.
_RUN_FIELDS = (
    "args", "kwargs", "key", "queue", "delivery", "countdown", "eta", "priority", "expires",
    "timeout", "callbacks", "errbacks", "request",
)  # fmt: skip
_RUN_KEYS = frozenset({"task", *_RUN_FIELDS})
#: Tasks that are not enqueued: Celery's built-ins and the kernel's own.
_NOT_ENQUEUED = ("celery.", "kernel.")
#: But these: Celery's builtins that run a task's body over many arguments in one call
#: (``task.map``, ``task.starmap``, each of ``task.chunks``' members), enqueued when
#: that task is routed (celery_app/enqueue_routing.py).
MAP_BUILTINS = frozenset({"celery.map", "celery.starmap"})
#: And this one: the body Celery gives a group a task is replaced with (a chord whose
#: body hands on its members' results), enqueued in a kernel run's replacement
#: (celery_app/task_call.py).
ACCUMULATE = "celery.accumulate"
#: Settled without success: result() raises.
_FINAL_FAILURES = frozenset(SETTLED) - {OccurrenceStatus.SUCCEEDED}


class RunFailed(KernelError):
    """The run settled without success; ``code`` is its error's (or its status, upper-case).

    Also what a routed call's ``AsyncResult`` holds when the kernel dead-lettered the
    run without its body's answer (:func:`celery_app.task_results.store_end`).
    """

    code = "RUN_FAILED"

    def __init__(self, message: str, code: str, **details: Any) -> None:
        super().__init__(message, **details)
        self.code = code
        # A result backend stores an exception as its type and args and rebuilds it
        # from them: both arguments go with it.
        self.args = (message, code)


class ResultTimeout(KernelError, TimeoutError):
    """The run had not settled when :func:`result`'s timeout passed."""

    code = "RESULT_TIMEOUT"


@dataclass
class _Client:
    """One process's kernel and settings for enqueueing (opened on first use, per process)."""

    pid: int
    kernel: Kernel
    settings: KernelSettings


_client_lock = threading.Lock()


def _client(app: Any) -> _Client:
    """This process's kernel for ``app``: a worker process's own, else one opened here."""
    current: _Client | None = getattr(app, "_kernel_enqueue_client", None)
    if current is not None and current.pid == os.getpid():
        return current
    with _client_lock:
        again: _Client | None = getattr(app, "_kernel_enqueue_client", None)
        if again is not None and again.pid == os.getpid():
            return again
        worker = getattr(app, "_kernel_resources", None)
        kernel = worker.kernel if worker is not None and worker.pid == os.getpid() else None
        current = _new_client(app, kernel or open_kernel(app))
        app._kernel_enqueue_client = current
        return current


def process_kernel(app: Any) -> Kernel:
    """This process's kernel for ``app`` (a worker process's own, else one opened here)."""
    return _client(app).kernel


def _new_client(app: Any, kernel: Kernel) -> _Client:
    settings = KernelSettings.from_app(app)
    app.loader.import_default_modules()  # the tasks of `imports`, as a worker has them
    ensure_broker_folders(app)  # the embedded broker's, which a first hint needs
    return _Client(os.getpid(), kernel, settings)


def _task_settings(app: Any, name: str) -> dict[str, Any]:
    """The implicit job's fields from the registered task ``name`` (NOT_FOUND if none):
    its time limits, retry settings and queue, then its ``kernel_options`` (job spec
    fields, as a ``beat_schedule`` entry's ``kernel`` key)."""
    if name.startswith(_NOT_ENQUEUED) and name not in {*MAP_BUILTINS, ACCUMULATE}:
        raise InvalidArgument("task", f"{name!r} is Celery's or the kernel's own task")
    task = app.tasks.get(name)
    if task is None:
        ours = [t for t in app.tasks if not t.startswith(_NOT_ENQUEUED)]
        close = difflib.get_close_matches(name, ours, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise NotFound(
            f"task {name!r} is not registered with Celery app {app.main!r}{hint}",
            task=name,
            close=close,
        )
    fields, _ = task_fields(name, task)
    queue = getattr(task, "queue", None)
    if queue:
        fields["queue"] = queue
    options = getattr(task, "kernel_options", None) or {}
    if not isinstance(options, Mapping):
        raise InvalidArgument("kernel_options", f"of task {name!r} must be a dict of job fields")
    return {**fields, **options}


def run_queue(
    app: Any,
    task: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any] | None,
    options: Mapping[str, Any],
) -> str | None:
    """The queue of a run of the registered ``task`` called with Celery ``options``: the
    one Celery's router picks (:func:`~beat_schedule.routing.routed_queue`); None (its
    job's queue) when the call names none and the task's ``kernel_options`` do."""
    own = getattr(app.tasks[task], "kernel_options", None) or {}
    if options.get("queue") is None and "queue" in own:
        return None
    return routed_queue(app, task, args, kwargs, options)


@dataclass
class _Batch:
    """What one call reads once for all of its runs: each task's settings (one object
    per task, which the kernel encodes once a batch), and its queue when Celery's router
    picks it by the task's name alone (:func:`~beat_schedule.routing.routed_by_name`)."""

    settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    queues: dict[str, str | None] = field(default_factory=dict)

    def settings_of(self, app: Any, task: str) -> dict[str, Any]:
        settings = self.settings.get(task)
        if settings is None:
            settings = self.settings[task] = _task_settings(app, task)
        return settings

    def queue_of(self, app: Any, task: str, run: Mapping[str, Any]) -> str | None:
        if task in self.queues:
            return self.queues[task]
        queue = run_queue(app, task, run.get("args") or (), run.get("kwargs"), {})
        if routed_by_name(app, task):
            self.queues[task] = queue
        return queue


def _request(app: Any, task: str, run: Mapping[str, Any], batch: _Batch) -> EnqueueRequest:
    """One run's request (``batch``: what this call read so far)."""
    if not isinstance(task, str):
        raise InvalidArgument("task", "must be a task's name")
    own = dict(run)  # most runs have no links: nothing more to make
    for name in ("callbacks", "errbacks"):
        if name in own:
            own[name] = (
                with_settings(app, own[name], errbacks=name == "errbacks") if own[name] else []
            )
    settings = batch.settings_of(app, task)
    if own.get("queue") is None:
        own["queue"] = batch.queue_of(app, task, run)
    return EnqueueRequest(task, settings=settings, **own)


def with_settings(
    app: Any, signatures: Sequence[Mapping[str, Any]], *, errbacks: bool = False
) -> list[dict[str, Any]]:
    """Kernel link signatures (kernel/spec/enqueue_request.py), each with its task's
    implicit job settings, as the enqueue of that task would define them; ``errbacks``
    marked as Celery would call them (:func:`celery_app.errbacks.marked`)."""
    return [
        {
            **(marked(app, sig) if errbacks else sig),
            # A signature without a task is refused by the kernel, naming its place.
            "settings": _task_settings(app, sig["task"]) if sig.get("task") else {},
            **({"options": _routed_options(app, sig)} if sig.get("task") else {}),
            "callbacks": with_settings(app, sig.get("callbacks") or ()),
            "errbacks": with_settings(app, sig.get("errbacks") or (), errbacks=True),
            # A chain's steps after the next one (canvas_links.py), flat.
            **({"rest": with_settings(app, sig["rest"])} if sig.get("rest") else {}),
            **_chord_with_settings(app, sig.get("chord")),
        }
        for sig in signatures
    ]


def _chord_with_settings(app: Any, chord: Any) -> dict[str, Any]:
    """A chord step's ``chord`` with its members' settings (none without a chord)."""
    if not isinstance(chord, Mapping) or not isinstance(chord.get("header"), Sequence):
        return {} if chord is None else {"chord": chord}  # refused by the kernel, naming it
    return {"chord": {**chord, "header": with_settings(app, chord["header"])}}


def _routed_options(app: Any, sig: Mapping[str, Any]) -> Any:
    """A link's options with the queue Celery's router picks for it (from its own
    arguments: a router function cannot see the result a non-immutable link gets)."""
    options = sig.get("options") or {}
    if not isinstance(options, Mapping):
        return options  # refused by the kernel, naming it
    args, kwargs = sig.get("args") or (), sig.get("kwargs") or {}
    if not isinstance(args, Sequence) or not isinstance(kwargs, Mapping):
        return options  # refused by the kernel, naming them
    queue = run_queue(app, sig["task"], args, kwargs, options)
    return dict(options) if queue is None else {**options, "queue": queue}


def enqueue(
    app: Any,
    task_name: str,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    key: str | None = None,
    queue: str | None = None,
    delivery: str | None = None,
    countdown: float | None = None,
    eta: datetime | None = None,
    priority: int | None = None,
    callbacks: Sequence[Mapping[str, Any]] = (),
    errbacks: Sequence[Mapping[str, Any]] = (),
    expires: float | datetime | None = None,
    connection: Any = None,
    timeout: float | None = None,
    request: Mapping[str, Any] | None = None,
    producer: Any = None,
) -> Enqueued:
    """Run ``task_name`` through the kernel: a durable occurrence, then its hint.

    Args:
        app: the Celery app (with :func:`celery_app.install`).
        task_name: a task registered with ``app``.
        args, kwargs: its arguments (JSON).
        key: idempotency key (<= 200 characters): the same key of the same task gives the
            same occurrence, ``deduplicated``, for as long as it is retained.
        queue: the queue of its run (default: the task's, else ``celery``).
        delivery: ``at-least-once`` or ``at-most-once``; else the task's
            ``kernel_options`` delivery, else at-least-once.
        countdown, eta: claimable only after so many seconds, or from an aware datetime.
        priority: 0-255; higher runs are hinted and claimed first.
        callbacks, errbacks: kernel link signatures (plain JSON: ``task``, ``args``,
            ``kwargs``, ``immutable``, ``options`` task_id/queue/countdown/priority, and
            their own ``callbacks``/``errbacks``), enqueued by the settle that makes this
            run succeeded, or dead-lettered (a routed call's link, chain, link_error).
        expires: a start deadline, seconds from now or an aware datetime (Celery's
            ``expires``): not started by then, the run is skipped ``expired``, never late.
        timeout: this run's longest run in seconds, else its task's time limit: the body
            gets Celery's ``SoftTimeLimitExceeded`` then, and is ended shortly after.
        request: fields of the body's ``self.request`` as a Celery call's message sets
            them (``headers``, ``properties``, ``ignore_result``, ``time_limit``,
            ``soft_time_limit``, ``argsrepr``, ``kwargsrepr``, ``stamped_headers``,
            ``stamps``): a routed call's options (celery_app/enqueue_routing.py).
        connection: your open transaction on the kernel's database (a SQLAlchemy
            Connection, a psycopg 3 connection, or Django's ``connection`` inside
            ``transaction.atomic()``): the occurrence exists exactly when it commits.
        producer: the kombu producer its hint is published with (a routed call's
            ``producer``, as Celery's ``send_task`` takes it), else one of the app's pool.

    Returns:
        ``occurrence_id`` and ``deduplicated``.

    Raises:
        NotFound: no such task (the message names close ones).
        InvalidArgument: a field is invalid (non-JSON arguments name their path); nothing
            is written.
    """
    run = {
        "args": args,
        "kwargs": kwargs,
        "key": key,
        "queue": queue,
        "delivery": delivery,
        "countdown": countdown,
        "eta": eta,
        "priority": priority,
        "callbacks": callbacks,
        "errbacks": errbacks,
        "expires": expires,
        "timeout": timeout,
        "request": request,
    }
    client = _client(app)  # first: it loads the tasks of `imports`
    return _enqueue(
        app, [_request(app, task_name, run, _Batch())], connection, client, producer=producer
    )[0]


def enqueue_on(kernel: Kernel, app: Any, task_name: str, **run: Any) -> Enqueued:
    """:func:`enqueue` on an open kernel (the CLI's, the web server's), no connection."""
    client = _new_client(app, kernel)
    return _enqueue(app, [_request(app, task_name, run, _Batch())], None, client)[0]


def enqueue_many(
    app: Any,
    runs: Sequence[Mapping[str, Any]],
    connection: Any = None,
    *,
    chord: Mapping[str, Any] | None = None,
    nested: Sequence[tuple[int, Mapping[str, Any]]] = (),
) -> list[Enqueued]:
    """Several runs in one transaction: each a mapping with ``task`` and any of
    :func:`enqueue`'s keyword parameters. All of them are written, or none.
    ``chord``: ``{"id": ..., "body": kernel link signature}``: the runs are its members,
    in group order (:meth:`kernel.Kernel.enqueue_many`, which tells of an open chord and
    of ``{"id": ..., "grow": "caller"}``, its next members). ``nested``: (index, kernel
    link signature carrying a chord): chords made beside them, in ``chord`` its members
    at those indexes.

    Raises:
        NotFound, InvalidArgument: as :func:`enqueue`, the field prefixed ``runs[i].``.
    """
    client = _client(app)
    requests = _requests(app, runs)
    if chord is not None and "body" in chord:
        body = chord["body"]  # a group's: a list of signatures
        made = with_settings(app, body if isinstance(body, list) else [body])
        chord = {**chord, "body": made if isinstance(body, list) else made[0]}
    return _enqueue(app, requests, connection, client, chord, nested=_nested(app, nested))


def _nested(
    app: Any, nested: Sequence[tuple[int, Mapping[str, Any]]]
) -> list[tuple[int, Mapping[str, Any]]]:
    """Nested chords' links with their tasks' settings."""
    return [(index, with_settings(app, [sig])[0]) for index, sig in nested]


def _requests(app: Any, runs: Sequence[Mapping[str, Any]]) -> list[EnqueueRequest]:
    """The kernel's requests of ``runs`` (:func:`enqueue_many`'s)."""
    requests = []
    batch = _Batch()
    for index, run in enumerate(runs):
        try:
            if not isinstance(run, Mapping):
                raise InvalidArgument("task", "each run must be a mapping with 'task'")
            if not run.keys() <= _RUN_KEYS:
                unknown = sorted(set(run) - _RUN_KEYS)[0]
                raise InvalidArgument(unknown, "is not a parameter of enqueue")
            fields = {name: value for name, value in run.items() if name != "task"}
            requests.append(_request(app, run.get("task"), fields, batch))  # type: ignore[arg-type]
        except InvalidArgument as exc:
            why = exc.message.removeprefix(f"{exc.field}: ")
            raise InvalidArgument(f"runs[{index}].{exc.field}", why) from None
    return requests


def add_to_chord(
    app: Any,
    held: Any,
    runs: Sequence[Mapping[str, Any]],
    nested: Sequence[tuple[int, Mapping[str, Any]]] = (),
) -> list[Enqueued]:
    """The running occurrence ``held`` (its lease owner and fence: the claim's) adds
    ``runs`` (and chords ``nested``, as :func:`enqueue_many`'s) to its chord
    (:meth:`kernel.Kernel.add_to_chord`), their hints published.

    Raises:
        LeaseLost: the run no longer holds its lease; InvalidArgument: as enqueue_many,
            or the run is no chord's member, or its chord takes no more.
    """
    client = _client(app)
    requests = _requests(app, runs)
    made = client.kernel.add_to_chord(
        held.id,
        owner=held.lease_owner or "",
        fence=held.fence,
        requests=requests,
        nested=_nested(app, nested),
    )
    _publish(app, client, requests, made)
    return made


def _enqueue(
    app: Any,
    requests: list[EnqueueRequest],
    connection: Any,
    client: _Client,
    chord: Mapping[str, Any] | None = None,
    producer: Any = None,
    nested: Sequence[tuple[int, Mapping[str, Any]]] = (),
) -> list[Enqueued]:
    on_commit = _django_on_commit(connection)
    if on_commit is not None:
        connection = _django_driver_connection(connection)
    hinted = connection is None or on_commit is not None
    try:
        made = client.kernel.enqueue_many(
            requests, connection=connection, hinted=hinted, chord=chord, nested=nested
        )
    except InvalidArgument as exc:
        if len(requests) > 1 and exc.field.startswith("requests["):
            raise InvalidArgument(
                "runs" + exc.field.removeprefix("requests"),
                exc.message.removeprefix(f"{exc.field}: "),
            ) from None
        raise
    if connection is None:
        _publish(app, client, requests, made, producer)
    elif on_commit is not None:
        on_commit(lambda: _publish(app, client, requests, made, producer))
    return made


def _django_on_commit(connection: Any) -> Any:
    """Django's ``connection.on_commit`` when ``connection`` is Django's wrapper."""
    if connection is None or not hasattr(connection, "in_atomic_block"):
        return None
    if not connection.in_atomic_block:
        raise InvalidArgument(
            "connection", "Django's connection is outside transaction.atomic(): open one"
        )
    return connection.on_commit


def _django_driver_connection(connection: Any) -> Any:
    connection.ensure_connection()
    return connection.connection


def _publish(
    app: Any,
    client: _Client,
    requests: list[EnqueueRequest],
    made: list[Enqueued],
    producer: Any = None,
) -> None:
    """Publish the hints of the runs just made: at once for those that may run now, with
    Celery's ``eta`` for those held back by countdown/eta, so no Beat is needed (the pump
    sends them again ``kernel_rehint_after`` past their time when the broker is down).
    Each carries its run's task id, call and stamps (:func:`~celery_app.hints.publish_hints`)."""
    hints = [
        DispatchHint(
            m.occurrence_id,
            m.job_id,
            m.queue,
            "task",
            m.timeout,
            {"task": r.task, "args": r.args, "kwargs": r.kwargs, "request": r.request},
            m.priority,
            m.trigger_key,
        )
        for r, m in zip(requests, made, strict=True)
        if m.claimable or m.not_before is not None
    ]
    if not hints:
        return
    etas = {m.occurrence_id: m.not_before for m in made if m.not_before is not None}
    try:
        with app.producer_or_acquire(producer) as publisher:
            publish_hints(
                app,
                publisher,
                hints,
                batch_max=client.settings.batch_max,
                hint_options={},
                etas=etas,
                split_by_worker=True,  # a deep batch is one publish: its worker splits it
            )
    except OperationalError as exc:
        log.warning(
            "broker unavailable: %d enqueued occurrence(s) are stored and are hinted again "
            "by Beat after %gs (%s)",
            len(hints),
            client.settings.rehint_after,
            exc,
            extra={"action": "enqueue_hint_deferred"},
        )


def result(app: Any, occurrence_id: int, timeout: float | None = None) -> Any:
    """Wait for the occurrence to settle and return the result its run stored.

    Raises:
        RunFailed: it settled without success (dead letter, cancelled, skipped); ``code``
            is the run's error code.
        ResultTimeout: not settled within ``timeout`` seconds.
        NotFound: no such occurrence (or its history was pruned).
    """
    kernel = process_kernel(app)
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = 0.02
    while True:
        occ = kernel.get_occurrence(occurrence_id)
        if occ.status == OccurrenceStatus.SUCCEEDED:
            return occ.result
        if occ.status in _FINAL_FAILURES:
            error = occ.last_error or {}
            code = str(error.get("code") or occ.skip_reason or occ.status.value).upper()
            message = error.get("message") or f"occurrence {occurrence_id} is {occ.status.value}"
            raise RunFailed(
                f"occurrence {occurrence_id} {occ.status.value}: {message}",
                code,
                occurrence_id=occurrence_id,
                status=occ.status.value,
            )
        if deadline is not None and time.monotonic() >= deadline:
            raise ResultTimeout(
                f"occurrence {occurrence_id} is {occ.status.value} after {timeout:g}s",
                occurrence_id=occurrence_id,
                status=occ.status.value,
            )
        wait = pause if deadline is None else min(pause, max(0.0, deadline - time.monotonic()))
        time.sleep(wait)
        pause = min(pause * 2, 0.5)
