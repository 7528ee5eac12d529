"""Worker wiring: settings and schema checked at start, per-process kernel after fork,
warm-shutdown hand-back.

A worker that cannot start says why in one line and exits (2 for a setting, 1 for
an unreachable kernel): Celery would otherwise log the exception with a traceback
and carry on, or die on it.
"""

from __future__ import annotations

import gc
import logging
import os
from typing import Any

from celery import bootsteps
from celery.signals import (
    celeryd_init,
    worker_init,
    worker_process_init,
    worker_ready,
    worker_shutdown,
)

from adapters.shell import CONTAINMENT_ENV
from adapters.supervisor import containment
from celery_app.broker import use_embedded_broker
from celery_app.config import check_broker_url, ensure_broker_folders, open_kernel, refuse_start
from celery_app.main_watch import follow_main_process, note_forking_thread
from celery_app.prefork import default_size, use_for
from celery_app.settings import KernelSettings
from celery_app.warm_shutdown import (
    clear_warm_shutdown,
    request_warm_shutdown,
    share_warm_shutdown,
)
from celery_app.worker_process import keep_for_pool, process_resources
from kernel import KernelError, StorageUnavailable, masked_url

__all__ = ["WarmShutdownHandBack", "connect"]

log = logging.getLogger("celery_kernel.worker")


class WarmShutdownHandBack(bootsteps.StartStopStep):
    """On warm shutdown, ask running checkpoint-capable occurrences to hand back.

    Started after the pool, so it is stopped before the pool waits for running
    tasks: those reach their next safe point, store a checkpoint and return,
    consuming no attempt, so a deploy loses no work.
    """

    requires = ("celery.worker.components:Pool",)

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        # Every step is constructed before any is created, and the prefork pool forks
        # its children when it is created: migrating here means a fresh database has
        # its schema before a child opens its kernel, and a failure stops the worker.
        share_warm_shutdown(os.getpid())  # before the pool forks: its processes share it
        try:
            # Migrates when kernel_auto_migrate is on; kept for the pool processes.
            keep_for_pool(worker.app, open_kernel(worker.app))
        except KernelError as exc:
            refuse_start("worker", exc)

    def start(self, worker: Any) -> None:
        clear_warm_shutdown(os.getpid())

    def stop(self, worker: Any) -> None:
        log.info(
            "warm shutdown: asking running occurrences to hand back at their next safe point",
            extra={"action": "warm_shutdown"},
        )
        request_warm_shutdown(os.getpid())


def connect(app: Any) -> None:
    """Connect the worker's handlers for ``app``; a worker of another app ignores them."""

    def check_start(
        sender: Any = None, instance: Any = None, options: Any = None, **_: Any
    ) -> None:
        # Settings checked and the embedded broker's folders made by the processes that
        # use them (not on import). SystemExit, unlike an exception, passes through
        # Celery's signal dispatch.
        if instance is not None and instance.app is not app:
            return
        try:
            settings = KernelSettings.from_app(app)
            default_size(app, options or {}, settings.database_url)
            use_embedded_broker(app)  # before the consumer connects: the final broker URL
            check_broker_url(app)
            ensure_broker_folders(app)
        except KernelError as exc:
            refuse_start("worker", exc)

    def fresh_kernel_per_child(**_: Any) -> None:
        follow_main_process()
        # A forked child must not reuse its parent's database connections; its own
        # resources are made now, before its first task.
        parent = getattr(app, "_kernel_resources", None)
        if parent is not None:
            parent.kernel.engine.dispose(close=False)
        try:
            process_resources(app, main_pid=os.getppid())
        except StorageUnavailable as exc:  # a database restart: the first task opens it again
            log.warning(
                "new pool process could not open the kernel yet: %s",
                exc,
                extra={"action": "storage_unavailable"},
            )

    def freeze_before_fork(sender: Any = None, **_: Any) -> None:
        # What the main process holds when it forks is shared with the pool process;
        # kept out of the collector's passes, those pages stay shared instead of being
        # copied into each child (the worker's PSS: bench/end_to_end.py, issue 22).
        # Frozen at each fork, not now: the steps built after this signal (the schema
        # check among them) leave objects the children would otherwise copy.
        if sender is None or sender.app is app:
            main_pid = os.getpid()

            def freeze() -> None:
                if os.getpid() == main_pid:
                    gc.collect()
                    gc.freeze()

            os.register_at_fork(before=freeze)
            note_forking_thread()

    def choose_pool(sender: Any = None, **_: Any) -> None:
        if sender is not None and sender.app is app:
            use_for(sender)  # the worker builds its pool after this signal

    def remove_shutdown_marker(sender: Any = None, **_: Any) -> None:
        # The warm-shutdown marker ends with its worker (Celery calls no step's shutdown()).
        clear_warm_shutdown(os.getpid())

    def announce(sender: Any = None, **_: Any) -> None:
        if sender is None or sender.app is app:
            # The absolute database, so a second kernel cannot go unnoticed.
            url = masked_url(KernelSettings.from_app(app).database_url)
            mode, why = containment(os.environ.get(CONTAINMENT_ENV))
            log.info(
                "celery-kernel worker ready: kernel -> %s; shell runs contained by %s: %s",
                url,
                mode,
                why,
                extra={"action": "worker_ready", "containment": mode},
            )

    # weak=False: the handlers are closures that nothing else keeps alive.
    celeryd_init.connect(check_start, weak=False)
    worker_init.connect(freeze_before_fork, weak=False)
    worker_init.connect(choose_pool, weak=False)
    worker_process_init.connect(fresh_kernel_per_child, weak=False)
    worker_shutdown.connect(remove_shutdown_marker, weak=False)
    worker_ready.connect(announce, weak=False)
    app.steps["worker"].add(WarmShutdownHandBack)
