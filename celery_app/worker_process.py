"""A worker process's own resources: its kernel engine (not shared across fork), its
adapters, its lease keeper and the lease owner of its claims, made on first use and again
after a fork. Every task of the kernel's runs with them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from billiard.process import current_process

from adapters.base import Adapter
from adapters.registry import load_adapters
from celery_app.config import KernelSettings, open_kernel
from celery_app.held_run import LeaseKeeper, new_owner
from celery_app.scope import Scope
from kernel import Kernel

__all__ = ["ProcessResources", "process_resources"]


@dataclass
class ProcessResources:
    """A worker process's own kernel engine (not shared across fork), adapters and lease keeper."""

    pid: int
    kernel: Kernel
    adapters: dict[str, Adapter]
    main_pid: int
    keeper: LeaseKeeper
    #: The lease owner of every claim this process makes (each claim has its own fence).
    owner: str
    scope: Scope


def process_resources(
    celery_app: Any, *, main_pid: int | None = None, schema_checked: bool = False
) -> ProcessResources:
    """This process's resources, created on first use and again after a fork.

    ``schema_checked``: the worker's main process checked the database's schema at
    start, so a pool process it forked opens the kernel without checking it again: the
    check reflects every table, and left ~4.5 MB private in each child right after the
    fork (a probe; the benchmark's peak PSS, after thousands of runs, is the same).
    """
    current: ProcessResources | None = getattr(celery_app, "_kernel_resources", None)
    if current is not None and current.pid == os.getpid():
        return current
    resources = ProcessResources(
        pid=os.getpid(),
        kernel=open_kernel(celery_app, migrate=False, check_schema=not schema_checked),
        adapters=load_adapters(celery_app),
        main_pid=main_pid or (current.main_pid if current else _worker_main_pid()),
        keeper=LeaseKeeper(),
        owner=new_owner(),
        scope=Scope.of(KernelSettings.from_app(celery_app)),
    )
    celery_app._kernel_resources = resources
    return resources


def _worker_main_pid() -> int:
    """The worker's main process, whose warm-shutdown marker this process must watch.

    A prefork pool child's parent is the main process; any other pool runs tasks in it.
    """
    return os.getpid() if current_process().name == "MainProcess" else os.getppid()
