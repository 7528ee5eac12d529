"""A worker's pool size when nothing sets it: more processes than CPUs on a PostgreSQL
kernel, Celery's own default on SQLite; ``-c`` and ``worker_concurrency`` always win."""

from __future__ import annotations

import pytest
from billiard import cpu_count
from integration.stack import SETTINGS_MODULE, Stack

from celery_app.prefork import PROCESSES_PER_CPU


def _pool_processes(stack: Stack, concurrency: int | None) -> int:
    """How many pool processes a prefork worker started with ``concurrency`` runs."""
    worker = stack.start_worker(f"worker-{len(stack.procs)}", concurrency=concurrency)
    # Ready means the pool was started: its processes are the worker's children.
    return len(worker.children())


@pytest.mark.parametrize("stack", ["redis+postgres"], indirect=True)
def test_a_worker_on_postgresql_runs_more_processes_than_cpus_unless_told(stack: Stack) -> None:
    assert _pool_processes(stack, None) == PROCESSES_PER_CPU * cpu_count()
    assert _pool_processes(stack, 3) == 3  # the command line's -c
    with (stack.root / f"{SETTINGS_MODULE}.py").open("a") as settings:
        settings.write("worker_concurrency = 1\n")
    assert _pool_processes(stack, None) == 1  # the configuration's worker_concurrency


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_a_worker_on_sqlite_keeps_celery_s_default_pool_size(stack: Stack) -> None:
    # One writer serialises SQLite's runs: more processes would only cost memory.
    assert _pool_processes(stack, None) == cpu_count()
