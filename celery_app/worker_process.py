"""A worker process's own resources: its kernel (inherited from the worker's main process,
on connections of its own), its adapters, its lease keeper and the lease owner of its
claims, made on first use and again after a fork. Every task of the kernel's runs with
them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from billiard.process import current_process

from adapters.base import Adapter
from adapters.registry import load_adapters
from adapters.task import TaskAdapter
from celery_app.config import open_kernel
from celery_app.held_run import LeaseKeeper, new_owner
from celery_app.scope import Scope
from celery_app.settings import KernelSettings
from celery_app.task_call import call_task
from kernel import Kernel, current_pid

__all__ = ["ProcessResources", "keep_for_pool", "process_resources"]

_POOL_KERNEL = "_kernel_for_pool"


@dataclass
class ProcessResources:
    """A worker process's kernel (its connections its own), adapters and lease keeper."""

    pid: int
    kernel: Kernel
    adapters: dict[str, Adapter]
    main_pid: int
    keeper: LeaseKeeper
    #: The lease owner of every claim this process makes (each claim has its own fence).
    owner: str
    scope: Scope
    #: ``kernel_batch_max``: a hint with more ids is split by the process taking it.
    batch_max: int


def process_resources(celery_app: Any, *, main_pid: int | None = None) -> ProcessResources:
    """This process's resources, created on first use and again after a fork.

    Their kernel is the one the worker's main process opened, checked and prepared for
    the fork (:func:`keep_for_pool`), when there is one: the pool processes share its
    rendered statements and its engine's set-up instead of each making (and copying)
    its own; else one opened here.
    """
    current: ProcessResources | None = getattr(celery_app, "_kernel_resources", None)
    # The kernel's pid, kept across forks: os.getpid() is a system call per task.
    if current is not None and current.pid == current_pid():
        return current
    inherited: Kernel | None = getattr(celery_app, _POOL_KERNEL, None)
    if inherited is not None:
        inherited.engine.dispose(close=False)  # the parent's connections are not ours
    settings = KernelSettings.from_app(celery_app)
    resources = ProcessResources(
        pid=current_pid(),
        kernel=inherited or open_kernel(celery_app, migrate=False),
        adapters=_adapters(celery_app),
        main_pid=main_pid or (current.main_pid if current else _worker_main_pid()),
        keeper=LeaseKeeper(),
        owner=new_owner(),
        scope=Scope.of(settings),
        batch_max=settings.batch_max,
    )
    celery_app._kernel_resources = resources
    return resources


def _adapters(celery_app: Any) -> dict[str, Adapter]:
    adapters = load_adapters(celery_app)
    task = adapters.get("task")
    if isinstance(task, TaskAdapter):  # the app's task body runs as Celery's worker runs it
        task.call = call_task
    return adapters


def keep_for_pool(celery_app: Any, kernel: Kernel) -> None:
    """In the worker's main process, before it forks its pool: ``kernel`` (opened and
    checked there) becomes every pool process's (bench/end_to_end.py: the worker's PSS
    over stock, PostgreSQL, about 8 MB less)."""
    kernel.prepare_fork()
    setattr(celery_app, _POOL_KERNEL, kernel)


def _worker_main_pid() -> int:
    """The worker's main process, whose warm-shutdown marker this process must watch.

    A prefork pool child's parent is the main process; any other pool runs tasks in it.
    """
    return os.getpid() if current_process().name == "MainProcess" else os.getppid()
