"""Several Beats with different schedules on one kernel (issue 38, item 8).

Each Beat's ``beat_schedule`` is a job source of its own, named by ``kernel_beat_source``
(``KERNEL_BEAT_SOURCE``) or, by default, after its app: a Beat retires only the jobs of
its own source, so one silo's Beat starting does not disable another silo's jobs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.beat import Service

from celery_app import install
from celery_app.beat import KernelScheduler
from kernel import Kernel


@pytest.fixture
def start_beat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kernel_url: str
) -> Iterator[Callable[..., KernelScheduler]]:
    """Start a Beat of an own app (``Celery(main)`` + ``install``) on one shared kernel."""
    monkeypatch.chdir(tmp_path)
    for name in ("CELERY_BROKER_URL", "CELERY_CONFIG_MODULE", "KERNEL_JOBS_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KERNEL_DATABASE_URL", kernel_url)
    started: list[KernelScheduler] = []

    def start(main: str, beat_schedule: dict[str, Any], **conf: Any) -> KernelScheduler:
        app = Celery(main, set_as_current=False)
        app.conf.update(beat_schedule=beat_schedule, **conf)
        install(app)
        scheduler = Service(app, scheduler_cls=app.conf.beat_scheduler).get_scheduler()
        assert isinstance(scheduler, KernelScheduler)
        started.append(scheduler)
        return scheduler

    yield start
    for scheduler in started:
        scheduler.close()


def _enabled(url: str) -> dict[str, bool]:
    kernel = Kernel.open(url)
    try:
        return {job.id: job.enabled for job in kernel.list_jobs()}
    finally:
        kernel.close()


def test_two_apps_beats_keep_each_others_jobs(
    start_beat: Callable[..., KernelScheduler], kernel_url: str
) -> None:
    control = {"sync-users": {"task": "control.sync", "schedule": 60.0}}
    region = {"rollup": {"task": "region.rollup", "schedule": 30.0}}
    start_beat("control", control)
    start_beat("region", region)
    start_beat("control", control)  # restarted: still nothing of region's is retired
    assert _enabled(kernel_url) == {"sync-users": True, "rollup": True}


def test_one_app_with_two_schedules_names_its_sources(
    start_beat: Callable[..., KernelScheduler], kernel_url: str
) -> None:
    # One app module, one Beat per silo: the setting tells the schedules apart.
    start_beat("shop", {"a": {"task": "t", "schedule": 60.0}}, kernel_beat_source="silo-a")
    start_beat("shop", {"b": {"task": "t", "schedule": 60.0}}, kernel_beat_source="silo-b")
    assert _enabled(kernel_url) == {"a": True, "b": True}
    # Within its own source a removed entry is still retired.
    start_beat("shop", {}, kernel_beat_source="silo-a")
    assert _enabled(kernel_url) == {"a": False, "b": True}


def test_an_entry_moved_to_another_beats_schedule_runs_there(
    start_beat: Callable[..., KernelScheduler], kernel_url: str
) -> None:
    entry = {"report": {"task": "t", "schedule": 60.0}}
    start_beat("shop", entry, kernel_beat_source="silo-a")
    # Moved: silo A starts first without it (retired), then silo B lists it.
    start_beat("shop", {}, kernel_beat_source="silo-a")
    start_beat("shop", entry, kernel_beat_source="silo-b")
    assert _enabled(kernel_url) == {"report": True}
    start_beat("shop", {}, kernel_beat_source="silo-a")  # no longer silo A's to retire
    assert _enabled(kernel_url) == {"report": True}
