"""Tasks through the kernel by their own ``.delay()``: ``kernel_route_tasks`` and
``my_task.kernel``.

:func:`hook_apply_async` (called by ``install(app)``) wraps Celery's
``Task.apply_async`` once per process: for an app the kernel is installed on, a task
whose name matches a ``kernel_route_tasks`` glob pattern is enqueued
(:func:`celery_app.enqueue`) instead of published, and answers a :class:`RoutedResult`;
every other call is Celery's own. ``my_task.kernel.delay(...)`` enqueues one task
explicitly, whatever the setting.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from fnmatch import fnmatchcase
from typing import Any

from celery.app.task import Task
from celery.utils.time import maybe_make_aware

from beat_schedule.task_settings import kernel_priority
from celery_app.enqueueing import enqueue, result
from celery_app.settings import KernelSettings
from kernel import Enqueued, InvalidArgument

__all__ = ["RoutedResult", "TaskShortcut", "hook_apply_async"]


#: ``apply_async`` options a routed call honours (``task_id`` becomes the key).
_ROUTED_OPTIONS = frozenset(
    {"countdown", "eta", "priority", "queue", "task_id", "soft_time_limit", "time_limit"}
)
#: Options about how Celery would publish a message the kernel does not send: the
#: occurrence is the message, so they change nothing a run does.
_PUBLISHING_OPTIONS = frozenset(
    {"compression", "connection", "exchange", "producer", "publisher", "reply_to", "retry",
     "retry_policy", "router", "routing_key", "add_to_parent", "root_id", "parent_id"}
)  # fmt: skip


@dataclass(frozen=True)
class RoutedResult:
    """What a routed ``.delay()`` / ``.apply_async()`` returns in place of an AsyncResult."""

    app: Any
    occurrence_id: int
    deduplicated: bool

    @property
    def id(self) -> str:
        return str(self.occurrence_id)

    def get(self, timeout: float | None = None) -> Any:
        """The run's result (:func:`result`)."""
        return result(self.app, self.occurrence_id, timeout)


def refused_options(options: Mapping[str, Any]) -> list[str]:
    """The options of a routed call the kernel cannot honour: canvas links (``link``,
    ``link_error``, a chain's rest, a chord, a group), ``expires``,
    ``headers``, ``shadow``, a serializer other than JSON, ``ignore_result``..."""
    return sorted(
        name
        for name, value in options.items()
        if value not in (None, False)
        and name not in _ROUTED_OPTIONS | _PUBLISHING_OPTIONS
        and not (name == "serializer" and value == "json")
    )


def _routed_call(task: Any, args: Any, kwargs: Any, options: Mapping[str, Any]) -> RoutedResult:
    refused = refused_options(options)
    if refused:
        # Refused before anything is written: dropping a link or a chain's rest would
        # leave the caller waiting on a step that never runs.
        raise InvalidArgument(
            ", ".join(refused),
            f"task {task.name} is routed through the kernel (kernel_route_tasks), which "
            f"does not honour these apply_async options; it honours "
            f"{', '.join(sorted(_ROUTED_OPTIONS))}. Call the task without them, or leave "
            f"it out of kernel_route_tasks to publish it through Celery",
            task=task.name,
        )
    eta, priority = options.get("eta"), options.get("priority")
    if isinstance(eta, str):
        eta = datetime.fromisoformat(eta)
    made = enqueue(
        task.app,
        task.name,
        list(args or ()),
        dict(kwargs or {}),
        key=options.get("task_id"),
        queue=options.get("queue"),
        countdown=options.get("countdown"),
        eta=None if eta is None else maybe_make_aware(eta),
        # Celery's priority as the app's broker orders it, on the kernel's scale.
        priority=None if priority is None else kernel_priority(task.app.conf, priority, "priority"),
        # The soft limit (else the hard one) is the run's timeout, as a task's own limits
        # are its job's (beat_schedule.task_settings.task_fields).
        timeout=options.get("soft_time_limit") or options.get("time_limit"),
    )
    return RoutedResult(task.app, made.occurrence_id, made.deduplicated)


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


_hook_lock = threading.Lock()


def hook_apply_async() -> None:
    """Route ``apply_async`` (and so ``delay``) of the tasks ``kernel_route_tasks`` names,
    for apps the kernel is installed on; every other call is Celery's own. Idempotent."""
    with _hook_lock:
        if getattr(Task.apply_async, "_kernel_routed", False):
            return
        celerys = Task.apply_async

        def apply_async(self: Any, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
            app = self.app
            if getattr(app, "_kernel_installed", False) and not self.name.startswith("kernel."):
                patterns = _routes(app)
                if patterns and any(fnmatchcase(self.name, p) for p in patterns):
                    return _routed_call(self, args, kwargs, options)
            return celerys(self, args, kwargs, **options)

        apply_async._kernel_routed = True  # type: ignore[attr-defined]
        Task.apply_async = apply_async
        Task.kernel = property(TaskShortcut)
