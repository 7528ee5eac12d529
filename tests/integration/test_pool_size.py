"""A worker's pool size when nothing sets it: more processes than CPUs on a PostgreSQL
kernel, Celery's own default on SQLite; ``-c`` and ``worker_concurrency`` always win. The
same project's app without the kernel (stock Celery) keeps Celery's default."""

from __future__ import annotations

import sys

import pytest
from billiard import cpu_count
from integration.stack import SETTINGS_MODULE, Proc, Stack
from integration.test_enqueue import APP, ROUTED_AND_STOCK, TASKS, Project

from celery_app.prefork import default_processes


def _pool_processes(stack: Stack, concurrency: int | None) -> int:
    """How many pool processes a prefork worker started with ``concurrency`` runs."""
    worker = stack.start_worker(f"worker-{len(stack.procs)}", concurrency=concurrency)
    # Ready means the pool was started: its processes are the worker's children.
    return len(worker.children())


def test_the_default_is_two_per_cpu_at_most_four_more_than_the_cpus() -> None:
    # A large host's server is the limit first, and each process holds a connection.
    assert [default_processes(cpus) for cpus in (1, 2, 4, 8, 64)] == [2, 4, 8, 12, 68]


@pytest.mark.parametrize("stack", ["redis+postgres"], indirect=True)
def test_a_worker_on_postgresql_runs_more_processes_than_cpus_unless_told(stack: Stack) -> None:
    assert _pool_processes(stack, None) == default_processes(cpu_count())
    assert _pool_processes(stack, 3) == 3  # the command line's -c
    with (stack.root / f"{SETTINGS_MODULE}.py").open("a") as settings:
        settings.write("worker_concurrency = 1\n")
    assert _pool_processes(stack, None) == 1  # the configuration's worker_concurrency


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_a_worker_on_sqlite_keeps_celery_s_default_pool_size(stack: Stack) -> None:
    # One writer serialises SQLite's runs: more processes would only cost memory.
    assert _pool_processes(stack, None) == cpu_count()


@pytest.mark.parametrize("stack", ["redis+postgres"], indirect=True)
def test_the_same_app_on_stock_celery_keeps_celery_s_default(stack: Stack) -> None:
    project = Project(stack, settings=ROUTED_AND_STOCK, tasks=TASKS)
    # The project's app module as it was before install(app), on the same broker: stock
    # Celery (its tasks left out: importing them installs the kernel on myproj's app).
    (stack.root / "stockproj.py").write_text(
        APP.replace("from celery_app import install\n", "")
        .replace("install(app)\n", "")
        .replace("myproj", "stockproj")
    )
    (stack.root / "stockproj_settings.py").write_text(
        ROUTED_AND_STOCK.replace('imports = ["myproj_tasks"]\n', "")
    )
    expected = {"myproj": default_processes(cpu_count()), "stockproj": cpu_count()}
    for module, processes in expected.items():
        name = f"{module}-worker"
        proc = Proc(name, [sys.executable, "-m", "celery", "-A", module, "worker", "-n",
                           f"{name}@%h", "-l", "INFO", "--without-mingle", "--without-gossip"],
                    cwd=stack.root, env=project.env)  # fmt: skip
        stack.procs.append(proc)
        stack.wait(lambda p=proc: "ready." in p.log(), timeout=30, what=f"{name} ready")
        assert len(proc.children()) == processes, module
