"""The queue of a run as Celery's own router picks it.

Celery decides a message's queue in ``apply_async``: the call's ``options`` over the
task's own execution options (its ``queue``), then ``task_routes`` (maps, glob and regex
patterns, router functions), then ``task_default_queue``. The kernel asks that same
router (``app.amqp.router``, or a call's own ``router``) so a moved app's runs land on
the queues its workers consume, for routed calls, enqueues, links and Beat entries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from celery.app.routes import MapRoute
from celery.exceptions import QueueNotFound
from kombu.entity import Queue

from kernel import InvalidArgument

__all__ = ["routed_by_name", "routed_queue"]


def routed_by_name(app: Any, name: str) -> bool:
    """Whether Celery's router picks task ``name``'s queue (called without options) from
    its name alone: ``task_routes`` holds maps, globs and regular expressions only, and
    the task names no router of its own. Then one answer serves every run of it in a
    batch; a router function may read each call's arguments."""
    task = app.tasks.get(name)
    if task is not None and task._get_exec_options().get("router") is not None:
        return False
    return all(isinstance(route, MapRoute) for route in app.amqp.router.routes)


def routed_queue(
    app: Any,
    name: str,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
    *,
    where: str = "queue",
) -> str:
    """The name of the queue Celery's router sends task ``name`` called with ``args``,
    ``kwargs`` and ``apply_async`` ``options`` to, as ``Task.apply_async`` would.

    Raises:
        InvalidArgument: the router names no queue (only an exchange or routing key, which
            the kernel's hints cannot follow), or a queue missing from ``task_queues`` with
            ``task_create_missing_queues`` off (``where`` names the field).
    """
    task = app.tasks.get(name)
    # As Task.apply_async: the task's own execution options under the call's.
    merged = dict(task._get_exec_options() if task is not None else {}, **(options or {}))
    router = merged.get("router") or app.amqp.router
    try:
        routed = router.route(merged, name, tuple(args), dict(kwargs or {}), task)
    except QueueNotFound as exc:
        raise InvalidArgument(
            where,
            f"task {name}: {exc}; declare the queue in task_queues or set "
            "task_create_missing_queues",
        ) from None
    queue = routed.get("queue")
    if queue is None:
        raise InvalidArgument(
            where,
            f"task {name}: Celery's routing sends it to exchange "
            f"{routed.get('exchange')!r} with routing key {routed.get('routing_key')!r}, "
            "not to a queue, and the kernel hints its runs to a queue: give the route a "
            "'queue' (task_routes) or the call a queue=",
        )
    return str(queue.name if isinstance(queue, Queue) else queue)
