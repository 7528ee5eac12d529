"""Two own apps' Beats, each with its own ``beat_schedule``, on one PostgreSQL kernel
(issue 38, item 8): neither disables the other's jobs when it starts, restarts included.
"""

from __future__ import annotations

import sys
import time

import pytest
from integration.stack import Proc, Stack

pytestmark = pytest.mark.long

APP = """\
from celery import Celery
from celery_app import install

app = Celery("{name}")
app.conf.beat_schedule = {schedule}
install(app)
"""

SCHEDULES = {
    "control": {"sync-users": {"task": "control.sync", "schedule": 3600.0}},
    "region": {"rollup": {"task": "region.rollup", "schedule": 3600.0},
               "purge": {"task": "region.purge", "schedule": 7200.0}},
}  # fmt: skip


@pytest.mark.parametrize("stack", ["redis+postgres"], indirect=True)
def test_two_apps_beats_on_one_postgresql_kernel_keep_each_others_jobs(stack: Stack) -> None:
    project = stack.root / "silos"
    project.mkdir()
    for name, schedule in SCHEDULES.items():
        (project / f"{name}.py").write_text(APP.format(name=name, schedule=schedule))
    env = {k: v for k, v in stack.env.items() if k != "CELERY_CONFIG_MODULE"}
    env["PYTHONPATH"] = str(project)

    def beat(name: str, run: int) -> Proc:
        proc = Proc(f"{name}-{run}", [sys.executable, "-m", "celery", "-A", name, "beat", "-l",
                    "INFO", "-s", str(project / f"{name}-{run}")],
                    cwd=project, env=env)  # fmt: skip
        stack.procs.append(proc)
        marker = f":{proc.pid}:"
        stack.wait(lambda: any(marker in b.id for b in stack.kernel.beats()), timeout=60,
                   what=f"beat {name} ticking")  # fmt: skip
        return proc

    def enabled() -> dict[str, bool]:
        return {job.id: job.enabled for job in stack.kernel.list_jobs()}

    everything = {"sync-users": True, "rollup": True, "purge": True}
    control = beat("control", 1)
    beat("region", 1)
    assert enabled() == everything
    control.expected_exit = True
    control.terminate()
    assert not control.reap(time.monotonic() + 30), "control's Beat did not stop on SIGTERM"
    beat("control", 2)  # a restart of one silo's Beat while the other runs
    assert enabled() == everything
    assert not any("job_retired" in e.type for e in stack.kernel.events(limit=200))
