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
from celery_app.canvas_groups import hook_canvas
from celery_app.enqueue_routing import hook_apply_async
from celery_app.revoking import hook_revoke
from celery_app.task_call import hook_task_methods

__all__ = ["KERNEL_DEFAULTS", "install", "kernel_defaults_layer"]

#: Celery settings the kernel's wiring relies on, where they differ from Celery's defaults.
#: Each applies only where the app's own configuration leaves Celery's default: they sit
#: behind the app's configuration (any ``config_from_object`` source, namespaced or not,
#: and ``app.conf``), in front of Celery's defaults only (see :func:`kernel_defaults_layer`).
#: The kernel's own tasks set what they need themselves (``ignore_result``, JSON messages),
#: so the app's serializers, results and acknowledgements stay what it chose.
KERNEL_DEFAULTS: dict[str, Any] = dict(
    beat_scheduler="celery_app.beat:KernelScheduler",
    broker_connection_retry_on_startup=True,
    # RabbitMQ keeps a broken connection, and the exclusive queues it declared, until its
    # socket closes or its heartbeats stop. A worker reconnecting sooner (behind a lossy
    # link) got RESOURCE_LOCKED on its control (pidbox) queue, a channel error, and
    # exited; retried like a connection error, it reconnects once the broker lets go.
    # (A non-exclusive control queue would avoid the lock, but RabbitMQ 4 deprecates
    # transient non-exclusive queues.)
    broker_channel_error_retry=True,
)
# Task events are left at Celery's default (off): they cost a third of a no-op task's
# throughput (bench/end_to_end.py, stock+E / stock), and Flower turns them on in every
# worker itself (its enable_events broadcast), so runs show there under their job's name.
# Prefetch is Celery's default too: a hint is claimed when it runs, so a prefetched hint
# lost with its worker costs only the pump's re-hint.


def kernel_defaults_layer(conf: Any) -> dict[str, Any] | None:
    """The map of :data:`KERNEL_DEFAULTS` in ``conf``, if installed."""
    return next((m for m in conf.maps if getattr(m, "_kernel_defaults", False)), None)


class _KernelDefaults(dict[str, Any]):
    _kernel_defaults = True


def _add_kernel_defaults(conf: Any) -> None:
    """Put :data:`KERNEL_DEFAULTS` just in front of Celery's own defaults (the last map), so
    every setting of the app's configuration wins over them (Celery's ``add_defaults``
    would put them in front of the app's configuration module)."""
    if kernel_defaults_layer(conf) is None:
        layer = _KernelDefaults(KERNEL_DEFAULTS)
        conf.defaults.insert(len(conf.defaults) - 1, layer)
        conf.maps.insert(len(conf.maps) - 1, layer)


def install(app: Any) -> Any:
    """Install the kernel onto the Celery app ``app`` and return it (idempotent).

    Sets each of :data:`KERNEL_DEFAULTS` only where the app's configuration leaves
    Celery's default (so ``celery -A yourproj beat`` uses the kernel's scheduler unless
    your configuration names another); nothing the app sets, in its configuration
    module, under its namespace or on ``app.conf``, before or after ``install``, is
    replaced. It registers
    ``kernel.run_occurrence`` and ``kernel.adjudicate_occurrence``, connects the
    worker's per-process kernel and warm-shutdown hand-back, and gives an app with no
    broker the embedded one (:func:`celery_app.broker.use_embedded_broker`). The
    kernel is configured by the app's ``kernel_*`` settings, found under its namespace
    as Celery finds its own (``CELERY_KERNEL_DATABASE_URL`` for
    ``namespace="CELERY"``), or ``KERNEL_*`` environment variables, which win;
    ``kernel doctor`` lists each with where its value came from.
    """
    if getattr(app, "_kernel_installed", False):
        return app
    if app.configured:
        _add_kernel_defaults(app.conf)
        use_embedded_broker(app)

    def configured(sender: Any = None, **_: Any) -> None:
        _add_kernel_defaults(sender.conf)
        use_embedded_broker(sender)

    # Each time the configuration is loaded (config_from_object reloads it); weak=False:
    # nothing else keeps the closure alive.
    app.on_after_configure.connect(configured, weak=False)
    tasks.register(app)
    adjudication.register(app)
    notify.register(app)
    signals.connect(app)
    hook_apply_async()  # kernel_route_tasks; `my_task.kernel.delay(...)`
    hook_canvas()  # a group or chord of routed tasks
    hook_task_methods()  # self.retry() and self.replace(sig) inside a kernel run
    hook_revoke()  # a worker's revoke of a routed run: the kernel's cancel
    app._kernel_installed = True
    return app
