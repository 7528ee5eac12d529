"""``kernel.run_occurrence``: claim through the kernel, run the adapter, settle. Thin on purpose."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from billiard.process import current_process

from adapters.base import Adapter
from adapters.registry import load_adapters
from celery_app.app import app
from celery_app.config import open_kernel
from celery_app.runtime import run_occurrence as run
from kernel import Kernel

__all__ = ["run_occurrence", "process_resources", "RUN_OCCURRENCE"]

RUN_OCCURRENCE = "kernel.run_occurrence"


@dataclass
class ProcessResources:
    """What one worker process holds: its own kernel engine (never shared across fork) and adapters."""

    pid: int
    kernel: Kernel
    adapters: dict[str, Adapter]
    main_pid: int


def process_resources(celery_app: Any, *, main_pid: int | None = None) -> ProcessResources:
    """This process's resources, created on first use and again after a fork."""
    current: ProcessResources | None = getattr(celery_app, "_kernel_resources", None)
    if current is not None and current.pid == os.getpid():
        return current
    resources = ProcessResources(
        pid=os.getpid(),
        kernel=open_kernel(celery_app, migrate=False),
        adapters=load_adapters(celery_app),
        main_pid=main_pid or (current.main_pid if current else _worker_main_pid()),
    )
    celery_app._kernel_resources = resources
    return resources


def _worker_main_pid() -> int:
    """The worker's main process, whose warm-shutdown marker this process must watch.

    A prefork pool child's parent is the main process; any other pool runs tasks in it.
    """
    return os.getpid() if current_process().name == "MainProcess" else os.getppid()


@app.task(name=RUN_OCCURRENCE, ignore_result=True)
def run_occurrence(occurrence_id: int) -> str:
    """Run occurrence ``occurrence_id`` if the kernel lets this worker claim it."""
    resources = process_resources(app)
    return run(resources.kernel, resources.adapters, int(occurrence_id), main_pid=resources.main_pid)
