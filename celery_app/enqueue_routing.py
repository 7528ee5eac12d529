"""Tasks through the kernel by their own ``.delay()``: ``kernel_route_tasks`` and
``my_task.kernel``.

:func:`hook_apply_async` (called by ``install(app)``) wraps Celery's
``Task.apply_async`` once per process: for an app the kernel is installed on, a task
whose name matches a ``kernel_route_tasks`` glob pattern is enqueued
(:func:`celery_app.enqueue`) instead of published, and answers Celery's own
``AsyncResult`` under the task id Celery would have given (``task_id``, else a fresh
uuid), which is the occurrence's key and the body's ``self.request.id``; the worker
writes the run's outcome to the app's result backend under it
(:mod:`celery_app.task_results`). ``app.send_task`` of a routed name is routed the same
way, and so is a ``task.map``/``task.starmap`` of a routed task (Celery's builtin
``celery.map``/``celery.starmap`` call, whose body loops over the task's: the kernel
worker runs that loop as Celery's worker would). Every other call is Celery's own, and so
is any call under ``task_always_eager`` (run in the caller, as Celery runs it).
``my_task.kernel.delay(...)`` enqueues one task explicitly, whatever the setting.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from datetime import datetime
from fnmatch import fnmatchcase
from typing import Any

from celery import Celery
from celery.app.task import Context, Task
from celery.backends.base import BaseKeyValueStoreBackend
from celery.utils import uuid
from celery.utils.time import maybe_make_aware

from beat_schedule.task_settings import kernel_priority
from celery_app.canvas_links import CANVAS_OPTIONS, links
from celery_app.enqueueing import MAP_BUILTINS, enqueue, run_queue
from celery_app.settings import KernelSettings
from celery_app.step_options import celery_json
from kernel import Enqueued, InvalidArgument

__all__ = ["TaskShortcut", "hook_apply_async", "routed", "routed_call", "routed_run"]


#: ``apply_async`` options a routed call honours (``task_id`` becomes the key; ``send_task``'s
#: ``result_cls`` is the class of what it answers; link, link_error and a chain's rest become
#: kernel links: celery_app/canvas_links.py; the time limits the run's timeout; ``producer``
#: publishes the run's hint; the request fields below, and ``root_id``/``parent_id``, reach
#: the body's ``self.request`` as Celery's worker gives them; ``add_to_parent``: the result
#: is among the calling task's children).
_ROUTED_OPTIONS = frozenset(
    {"countdown", "eta", "expires", "priority", "queue", "task_id", "result_cls",
     "soft_time_limit", "time_limit", "producer", "headers", "ignore_result", "argsrepr",
     "kwargsrepr", "stamped_headers", "root_id", "parent_id", "add_to_parent",
     *CANVAS_OPTIONS}
)  # fmt: skip
#: Message properties a call may set, which Celery's worker shows in
#: ``self.request.properties``: metadata only (``expiration``, ``delivery_mode`` and the
#: like would ask the broker for something the kernel does not do with its hint).
_PROPERTIES = frozenset({"app_id", "type", "message_id", "timestamp"})
#: Options about how Celery would publish a message the kernel does not send: the
#: occurrence is the message, so they change nothing a run does.
_PUBLISHING_OPTIONS = frozenset(
    {"compression", "connection", "exchange", "publisher", "reply_to", "retry",
     "retry_policy", "router", "routing_key", "route_name"}
)  # fmt: skip
#: The request fields Celery's worker sets from its own headers (Celery's
#: ``Context._get_custom_headers``), and the kernel's: a custom header of one of these names
#: would replace that value.
_CELERY_FIELDS = frozenset(
    {*Context.__dict__, "lang", "task", "argsrepr", "kwargsrepr", "compression", "kernel_run"}
)


def refused_options(options: Mapping[str, Any]) -> list[str]:
    """The options of a routed call the kernel cannot honour: a serializer other than JSON,
    ``shadow``, a broker's ``expiration``, a custom header that is one of Celery's own
    request fields (``headers.<name>``)..."""
    stamps = set(options.get("stamped_headers") or ())
    refused = [
        name
        for name, value in options.items()
        if value not in (None, False)
        and name not in _ROUTED_OPTIONS | _PUBLISHING_OPTIONS | _PROPERTIES | stamps
        and not (name == "serializer" and value == "json")
    ]
    refused += [
        f"headers.{name}" for name in options.get("headers") or {} if name in _CELERY_FIELDS
    ]
    return sorted(refused)


def _refusal(name: str, refused: list[str]) -> str:
    """Why a routed call is refused: a custom header named like one of Celery's request
    fields, an option the kernel does not honour."""
    headers = [field.removeprefix("headers.") for field in refused if field.startswith("headers.")]
    options = [field for field in refused if not field.startswith("headers.")]
    why = []
    if headers:
        why.append(
            f"it gives a call's custom headers to the body's self.request as Celery does, "
            f"where {', '.join(headers)} would replace Celery's own field: rename the header"
        )
    if options:
        why.append(
            f"it does not honour the apply_async options {', '.join(options)}; it honours "
            f"{', '.join(sorted(_ROUTED_OPTIONS | _PROPERTIES))} and the stamps "
            f"stamped_headers names: call the task without them, or leave it out of "
            f"kernel_route_tasks to publish it through Celery"
        )
    return f"task {name} is routed through the kernel (kernel_route_tasks): {'; '.join(why)}"


def _routed_call(task: Any, args: Any, kwargs: Any, options: Mapping[str, Any]) -> Any:
    task_id, run = routed_run(task, args, kwargs, options)
    enqueue(task.app, task.name, producer=options.get("producer"), **run)
    # As Celery's apply_async: the call's ignore_result, else the task's.
    ignored = bool(_given(options, "ignore_result", task))
    if not ignored and isinstance(task.backend, BaseKeyValueStoreBackend):
        # As Celery's send_task: the backend follows the id now (Redis subscribes to its
        # result channel), so an answer written before the caller's get() is not missed.
        # (A key-value backend needs no producer for it; the RPC one declares its reply
        # queue on the publishing channel, and a routed call publishes none.)
        task.backend.on_task_call(None, task_id)
    result = (options.get("result_cls") or task.AsyncResult)(task_id)
    result.ignored = ignored  # as Celery's send_task
    parent = task.app.current_worker_task
    if options.get("add_to_parent", True) and parent is not None:
        parent.add_trail(result)  # as Celery's send_task: among the calling task's children
    return result


def routed_run(
    task: Any, args: Any, kwargs: Any, options: Mapping[str, Any]
) -> tuple[str, dict[str, Any]]:
    """(task id, :func:`celery_app.enqueue`'s parameters) of a routed call of ``task``.

    Raises:
        InvalidArgument: an option the kernel cannot honour (named), before anything
            is written: dropping a link or a chain's rest would leave the caller waiting
            on a step that never runs.
    """
    refused = refused_options(options)
    if refused:
        raise InvalidArgument(", ".join(refused), _refusal(task.name, refused), task=task.name)
    callbacks, errbacks = links(options)
    if task.name in MAP_BUILTINS:
        # As Celery routes the builtin by its task's name (route_name): on its queue.
        kwargs = {**kwargs, "it": list(kwargs["it"])}
        inner = _inner(kwargs)
        queue = (
            run_queue(task.app, inner, (), {}, options)
            if inner in task.app.tasks
            else options.get("queue")
        )
    else:
        # The queue Celery's router picks for this very call (task_routes, task.queue...).
        queue = run_queue(task.app, task.name, args or (), kwargs, options)
    # As Celery's apply_async: the caller's task id, else a fresh one. As the key, the same
    # task id twice is one occurrence. The task's own expires unless the call gives one.
    task_id = options.get("task_id") or uuid()
    expires = options.get("expires", getattr(task, "expires", None))
    priority = options.get("priority")
    lineage = _lineage(task.app, options)
    # As Celery's worker applies a run's links: under its root (its own id at the top).
    _as_kernel_links(task.app, [*callbacks, *errbacks], lineage.get("root_id") or task_id)
    return task_id, {
        "args": celery_json(list(args or ())),
        "kwargs": celery_json(dict(kwargs or {})),
        "key": task_id,
        "queue": queue,
        "countdown": options.get("countdown"),
        "eta": _instant(options.get("eta")),
        # Celery's priority as the app's broker orders it, on the kernel's scale.
        "priority": (
            None if priority is None else kernel_priority(task.app.conf, priority, "priority")
        ),
        "callbacks": callbacks,
        "errbacks": errbacks,
        "expires": _instant(expires),
        # The soft limit (else the hard one) is the run's timeout, as a task's own limits
        # are its job's (beat_schedule.task_settings.task_fields).
        "timeout": options.get("soft_time_limit") or options.get("time_limit"),
        "request": {**_request_fields(task, options), **lineage},
    }


def _lineage(app: Any, options: Mapping[str, Any]) -> dict[str, str]:
    """The call's ``root_id`` and ``parent_id`` as Celery's ``send_task`` gives them: the
    call's own (a chain's steps are frozen with their root), else the task whose body
    makes the call's; none at the top (the run's root is then its own id)."""
    parent = app.current_worker_task
    root_id, parent_id = options.get("root_id"), options.get("parent_id")
    if parent is not None:
        root_id = root_id or parent.request.root_id or parent.request.id
        parent_id = parent_id or parent.request.id
    given = {"root_id": root_id, "parent_id": parent_id}
    return {name: value for name, value in given.items() if value}


def _as_kernel_links(app: Any, signatures: Sequence[dict[str, Any]], root_id: str) -> None:
    """Give every link (at any depth: callbacks, errbacks, a chain's rest, a chord's
    members) the call's ``root_id`` in its request, and its Celery ``priority`` on the
    kernel's scale, as a routed call's own (kernel/spec/enqueue_request.py)."""
    for sig in signatures:
        sig["request"] = {"root_id": root_id, **(sig.get("request") or {})}
        options = sig.get("options") or {}
        if options.get("priority") is not None:
            options["priority"] = kernel_priority(app.conf, options["priority"], "priority")
        nested = [*sig.get("callbacks", ()), *sig.get("errbacks", ()), *sig.get("rest", ())]
        chord = sig.get("chord")
        while chord:  # its members, and those of the chord it is followed by (then)
            nested += chord["header"]
            chord = chord.get("then")
        _as_kernel_links(app, nested, root_id)


def _given(options: Mapping[str, Any], name: str, task: Any) -> Any:
    """An option as Celery's ``apply_async`` reads it: the call's (even None), else the
    task's own."""
    return options[name] if name in options else getattr(task, name, None)


def _request_fields(task: Any, options: Mapping[str, Any]) -> dict[str, Any]:
    """What the call's message would carry for the body's ``self.request`` (the run's
    ``TaskRequest``, kernel/spec/sections.py): custom headers, properties, the time limits
    (the call's, else the task's, as Celery's apply_async merges them), the call's
    ignore_result, argsrepr and kwargsrepr, and stamps (the options ``stamped_headers``
    names)."""
    stamped = list(options.get("stamped_headers") or ())
    fields = {
        "headers": options.get("headers") or None,
        "properties": {n: options[n] for n in sorted(_PROPERTIES) if options.get(n) is not None},
        "time_limit": _given(options, "time_limit", task),
        "soft_time_limit": _given(options, "soft_time_limit", task),
        "ignore_result": options.get("ignore_result"),
        "argsrepr": options.get("argsrepr"),
        "kwargsrepr": options.get("kwargsrepr"),
        "stamped_headers": stamped or None,
        "stamps": {name: options.get(name) for name in stamped},
    }
    return {name: value for name, value in fields.items() if value not in (None, {})}


def _as_celery_calls(task: Any, args: Any, kwargs: Any) -> tuple[Any, Any]:
    """What Celery's ``apply_async`` does to a call before it publishes: its refusals
    (``ValueError``, ``TypeError``) and the arguments it sends."""
    soft, hard = task.soft_time_limit, task.time_limit
    if soft and hard and soft > hard:
        raise ValueError("soft_time_limit must be less than or equal to time_limit")
    # The call against the body's signature (a task class registered by hand may have none).
    check = getattr(task, "__header__", None) if task.typing else None
    if check is not None:
        check(*(args or ()), **(kwargs or {}))
    # A pydantic=True task's models, dumped as Celery dumps them for JSON.
    if task._dump_pydantic_arguments is not None:
        args, kwargs = task._dump_pydantic_arguments(args, kwargs)
    return args, kwargs


def _instant(value: Any) -> Any:
    """An ``eta`` or ``expires`` as Celery takes it: ISO text or a datetime (naive ones in
    the app's zone) made aware; a number of seconds as it is."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return maybe_make_aware(value) if isinstance(value, datetime) else value


class TaskShortcut:
    """``my_task.kernel``: ``.delay(*args, **kwargs)`` and ``.apply_async(args, kwargs,
    key=..., ...)`` through the kernel (:func:`enqueue`'s keyword parameters)."""

    def __init__(self, task: Any) -> None:
        self.task = task

    def delay(self, *args: Any, **kwargs: Any) -> Enqueued:
        return enqueue(self.task.app, self.task.name, args, kwargs)

    def apply_async(
        self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> Enqueued:
        return enqueue(self.task.app, self.task.name, args, kwargs, **options)


def _routes(app: Any) -> tuple[str, ...] | None:
    """``kernel_route_tasks`` of ``app``, read on its first ``apply_async``."""
    try:
        return app._kernel_route_tasks  # type: ignore[no-any-return]
    except AttributeError:
        app._kernel_route_tasks = KernelSettings.from_app(app).route_tasks
        return app._kernel_route_tasks  # type: ignore[no-any-return]


def routed(app: Any, name: str) -> bool:
    """Whether a call of task ``name`` on ``app`` goes through the kernel."""
    if not getattr(app, "_kernel_installed", False) or name.startswith("kernel."):
        return False
    return any(fnmatchcase(name, p) for p in _routes(app) or ())


def _inner(kwargs: Mapping[str, Any] | None) -> Any:
    """The name of the task a map builtin's ``kwargs`` loop over."""
    inner = (kwargs or {}).get("task")
    return inner.get("task") if isinstance(inner, Mapping) else getattr(inner, "name", inner)


def routed_call(app: Any, name: str, kwargs: Mapping[str, Any] | None) -> bool:
    """Whether a call of task ``name`` with ``kwargs`` goes through the kernel: a routed
    task's, or a map builtin's over a routed task."""
    if name in MAP_BUILTINS:
        inner = _inner(kwargs)
        return isinstance(inner, str) and routed(app, inner)
    return routed(app, name)


_hook_lock = threading.Lock()


def hook_apply_async() -> None:
    """Route ``apply_async`` (and so ``delay``) and ``app.send_task`` of the tasks
    ``kernel_route_tasks`` names, for apps the kernel is installed on; every other call is
    Celery's own. Idempotent."""
    with _hook_lock:
        if getattr(Task.apply_async, "_kernel_routed", False):
            return
        celerys = Task.apply_async
        celerys_send = Celery.send_task

        def apply_async(self: Any, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
            # An eager call runs here and now, as Celery's apply_async runs it: nothing to route.
            if not self.app.conf.task_always_eager and routed_call(self.app, self.name, kwargs):
                args, kwargs = _as_celery_calls(self, args, kwargs)
                return _routed_call(self, args, kwargs, options)
            return celerys(self, args, kwargs, **options)

        def send_task(
            self: Any, name: str, args: Any = None, kwargs: Any = None, **options: Any
        ) -> Any:
            # A routed task's apply_async never reaches here; a caller naming it does.
            if routed(self, name):
                self.loader.import_default_modules()  # its task, to read its settings
                task = self.tasks.get(name)
                if task is None:
                    raise InvalidArgument(
                        "name",
                        f"task {name!r} is routed through the kernel (kernel_route_tasks), "
                        f"which needs it registered in this process to enqueue it: import "
                        f"its module (or list it in the app's imports)",
                        task=name,
                    )
                return _routed_call(task, args, kwargs, options)
            return celerys_send(self, name, args, kwargs, **options)

        apply_async._kernel_routed = True  # type: ignore[attr-defined]
        Task.apply_async = apply_async
        Celery.send_task = send_task
        Task.kernel = property(TaskShortcut)
