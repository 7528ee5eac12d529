"""Celery's prefork pool: its size when nothing sets it, and the lock of its shared task
queue given back when a pool process dies holding it.

With a broker whose transport has no event loop (the embedded broker's), Celery runs
billiard's blocking pool: its processes take their tasks from one pipe, read under one
lock they all share. The idle process holding the lock waits in the read; the others
wait for the lock. A process killed from outside while it waits there (the OOM killer,
an operator) never releases the lock, and a semaphore does not know its holder: the
other pool processes and each replacement then waited for it forever (no task ran
again), and so did the worker's exit (billiard takes the lock to drain the pipe).

Here a pool process writes its PID into a word of shared memory while it holds that
lock, and the pool, as it cleans up a process that has ended, releases the lock when
the word still names that process. Not covered: a process killed in the few
instructions between taking the lock and writing the word (or clearing it and
releasing), or in the middle of reading a task (the pipe's stream is then cut anyway).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from billiard import cpu_count
from billiard.pool import Pool as BlockingPool
from celery.concurrency import get_implementation, prefork

__all__ = ["EXTRA_PROCESSES_MAX", "TaskPool", "default_processes", "default_size", "use_for"]

log = logging.getLogger("celery_kernel.worker")

#: At most this many pool processes beyond one per CPU for a worker on a PostgreSQL kernel
#: whose size nothing sets. Each process sits idle through its run's durable commit and
#: round trips; more processes than CPUs fill those waits until the CPU is full (2 CPUs: 4
#: processes ran a backlog 1.26 x faster than 2; bench/README.md, session 22). Bounded: on a
#: large host the server is the limit first, and each process holds a connection. SQLite
#: keeps Celery's one per CPU.
EXTRA_PROCESSES_MAX = 4


class _HolderNotingLock:
    """A process-shared lock that notes, in shared memory, the PID of the process holding it."""

    def __init__(self, lock: Any, holder: Any) -> None:
        self._lock = lock
        self._holder = holder  # a shared C int: 0, or the holder's PID

    def acquire(self, *args: Any, **kwargs: Any) -> bool:
        acquired = bool(self._lock.acquire(*args, **kwargs))
        if acquired:
            self._holder.value = os.getpid()
        return acquired

    def release(self) -> None:
        self._holder.value = 0
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def release_for(self, pid: int) -> bool:
        """Release the lock if process ``pid`` (which has ended) holds it; whether it did."""
        if self._holder.value != pid:
            return False
        self._holder.value = 0
        self._lock.release()  # a semaphore: any process may release it
        return True


class _Pool(BlockingPool):
    """billiard's blocking pool, releasing the task queue's lock a dead process held."""

    def _setup_queues(self) -> None:
        super()._setup_queues()
        # Made before the pool forks: every pool process shares the word.
        noting = _HolderNotingLock(self._inqueue._rlock, self._ctx.RawValue("i", 0))
        self._inqueue._rlock = noting
        # The supervisor and the result handler threads both clean up ended processes.
        self._releasing = threading.Lock()

    def process_flush_queues(self, worker: Any) -> None:
        # Called for each pool process that has ended (and been joined), before its
        # replacement is forked.
        super().process_flush_queues(worker)
        with self._releasing:
            released = self._inqueue._rlock.release_for(worker.pid)
        if released:
            log.warning(
                "pool process %s ended holding the lock of the pool's task queue; released",
                worker.pid,
                extra={"action": "pool_queue_lock_released", "pid": worker.pid},
            )


class TaskPool(prefork.TaskPool):
    """Celery's prefork pool; without an event loop, one that survives a killed process."""

    BlockingPool = _Pool


def use_for(worker: Any) -> None:
    """Before ``worker`` builds its pool: Celery's prefork pool becomes this one where
    Celery would run billiard's blocking pool (no event loop); any other is left alone."""
    if not worker.use_eventloop and get_implementation(worker.pool_cls) is prefork.TaskPool:
        worker.pool_cls = TaskPool


def default_processes(cpus: int) -> int:
    """The pool size of a worker on a PostgreSQL kernel that nothing sizes: two per CPU,
    at most :data:`EXTRA_PROCESSES_MAX` more than the CPUs."""
    return cpus + min(cpus, EXTRA_PROCESSES_MAX)


def default_size(app: Any, options: dict[str, Any], database_url: str) -> None:
    """Size the pool of a worker on a PostgreSQL kernel (:func:`default_processes`) when
    neither its command line (``-c``) nor its configuration (``worker_concurrency``)
    does. Before the worker reads its settings: from ``celeryd_init``, whose ``options``
    hold ``-c`` (Celery's command puts the configuration's value there when it is absent)."""
    if options.get("concurrency") or app.conf.worker_concurrency:
        return
    if database_url.startswith("postgresql"):
        app.conf.worker_concurrency = default_processes(cpu_count())
