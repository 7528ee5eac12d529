"""``install(app)``: put the kernel onto an existing Celery app, whatever its module.

An existing project keeps its own ``Celery()`` instance, its tasks and its
``beat_schedule`` and runs ``celery -A myproj worker|beat|kernel`` as before; one
call adds what celery-kernel needs: the Beat scheduler, the
``kernel.run_occurrence`` and ``kernel.adjudicate_occurrence`` tasks, the worker's
signal handlers and warm-shutdown step, and the embedded broker when the app names no
other. The ``kernel`` command is a Celery CLI plug-in and works with any app.
"""

from __future__ import annotations

from typing import Any

from celery_app import adjudication, notify, signals, tasks
from celery_app.broker import use_embedded_broker
from celery_app.enqueue_routing import hook_apply_async

__all__ = ["KERNEL_DEFAULTS", "install"]

#: Settings the kernel's wiring relies on. Installed as defaults: what the app's own
#: configuration sets, before or after ``install``, wins.
KERNEL_DEFAULTS: dict[str, Any] = dict(
    # Messages are hints carrying an occurrence id; JSON is all they need.
    task_serializer="json",
    result_serializer="json",
    event_serializer="json",
    accept_content=["json"],
    result_accept_content=["json"],
    # Results live in the kernel; a hint lost with its worker is re-published by the pump.
    task_ignore_result=True,
    task_acks_late=False,
    # Prefetch is Celery's default (4): a hint is claimed when it runs, so a prefetched
    # hint lost with its worker costs only the pump's re-hint; hints a process reserved
    # behind a long run wait for it (Celery's advice for long tasks,
    # worker_prefetch_multiplier=1, is the app's to set).
    # Task events are left at Celery's default (off): they cost a third of a no-op
    # task's throughput (bench/end_to_end.py, stock+E / stock), and Flower turns them on
    # in every worker itself (its enable_events broadcast, every 5 s), so each run shows
    # there under its job's name (the shadow) whenever Flower runs. -E turns them on too.
    # No task-sent events: those carry the real task name and could overwrite the job's.
    task_send_sent_event=False,
    beat_scheduler="celery_app.beat:KernelScheduler",
    beat_max_loop_interval=1,
    broker_connection_retry_on_startup=True,
    # RabbitMQ keeps a broken connection, and the exclusive queues it declared, until its
    # socket closes or its heartbeats stop. A worker reconnecting sooner (behind a lossy
    # link) got RESOURCE_LOCKED on its control (pidbox) queue, a channel error, and
    # exited; retried like a connection error, it reconnects once the broker lets go.
    # (A non-exclusive control queue would avoid the lock, but RabbitMQ 4 deprecates
    # transient non-exclusive queues.)
    broker_channel_error_retry=True,
)


def install(app: Any) -> Any:
    """Install the kernel onto the Celery app ``app`` and return it (idempotent).

    Adds :data:`KERNEL_DEFAULTS` as defaults (so ``celery -A yourproj beat`` uses the
    kernel's scheduler unless your configuration names another), registers
    ``kernel.run_occurrence`` and ``kernel.adjudicate_occurrence``, connects the
    worker's per-process kernel and warm-shutdown hand-back, and gives an app with no
    broker the embedded one (:func:`celery_app.broker.use_embedded_broker`). The
    kernel is configured by the app's ``kernel_*`` settings or ``KERNEL_*``
    environment variables (``kernel_database_url``).
    """
    if getattr(app, "_kernel_installed", False):
        return app
    app.add_defaults(KERNEL_DEFAULTS)
    if app.configured:
        use_embedded_broker(app)

    def embedded_broker(sender: Any = None, **_: Any) -> None:
        use_embedded_broker(sender)

    # Each time the configuration is loaded (config_from_object reloads it); weak=False:
    # nothing else keeps the closure alive.
    app.on_after_configure.connect(embedded_broker, weak=False)
    tasks.register(app)
    adjudication.register(app)
    notify.register(app)
    signals.connect(app)
    hook_apply_async()  # kernel_route_tasks; `my_task.kernel.delay(...)`
    app._kernel_installed = True
    return app
