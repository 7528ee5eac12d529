"""A Django project moves onto the kernel (issue 38, items 1 and 2): its own package with
``settings.py`` (``TIME_ZONE``, ``CELERY_*`` settings) and ``celery.py``
(``config_from_object("django.conf:settings", namespace="CELERY")``, then ``install``),
run from its directory as ``celery -A proj`` is, beside the same project on stock Celery.

The kernel reads its crontabs in Django's ``TIME_ZONE`` as Celery does, keeps every
setting the project made, finds ``CELERY_KERNEL_DATABASE_URL`` under the namespace, and
``kernel doctor`` lists where each setting came from and reports the Django-style
``KERNEL_DATABASE_URL`` line it does not read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("django")

SETTINGS = """\
from celery.schedules import crontab

SECRET_KEY = "not-secret"
USE_TZ = True
TIME_ZONE = "America/Los_Angeles"
CELERY_TASK_SERIALIZER = "pickle"
CELERY_RESULT_SERIALIZER = "pickle"
CELERY_ACCEPT_CONTENT = ["pickle", "json"]
CELERY_TASK_ACKS_LATE = True
CELERY_BEAT_MAX_LOOP_INTERVAL = 300
CELERY_KERNEL_DATABASE_URL = "sqlite:///{root}/proj.db"
KERNEL_DATABASE_URL = "sqlite:///{root}/not-read.db"
CELERY_BEAT_SCHEDULE = {{
    "midnight-report": {{"task": "proj.report", "schedule": crontab(hour=0, minute=0)}},
    "hourly-cleanup": {{"task": "proj.report", "schedule": crontab(minute=17)}},
}}
"""

CELERY = """\
import os
from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")
app = Celery("proj")
app.config_from_object("django.conf:settings", namespace="CELERY")
if os.environ.get("PROJ_STOCK") != "1":
    from celery_app import install
    install(app)

@app.task(name="proj.report")
def report():
    return "done"
"""

#: Prints the app's settings and, per beat_schedule entry, its firings over two days
#: around the spring-forward in Los Angeles: Celery Beat's own (its ScheduleEntry on a
#: simulated clock) on stock Celery, the kernel's (from the spec Beat applies) otherwise.
PROBE = """\
import json, os, sys
from datetime import UTC, datetime, timedelta
from celery.beat import ScheduleEntry
from proj.celery import app

START, END = datetime(2026, 3, 7, 8, tzinfo=UTC), datetime(2026, 3, 9, 8, tzinfo=UTC)
KEYS = ("task_serializer", "result_serializer", "accept_content", "task_acks_late",
        "task_ignore_result", "beat_max_loop_interval", "beat_scheduler")
out = {"conf": {k: app.conf[k] for k in KEYS}, "zone": str(app.timezone), "firings": {}}
if os.environ.get("PROJ_STOCK") == "1":
    for name, raw in app.conf.beat_schedule.items():
        clock = [START]
        entry = ScheduleEntry(name=name, task=raw["task"], schedule=raw["schedule"],
                              app=app, last_run_at=START)
        entry.schedule.nowfun = lambda: clock[0].astimezone(app.timezone)
        fired = []
        while clock[0] < END:
            due, wait = entry.is_due()
            if due:
                fired.append(clock[0].isoformat())
                entry = entry._next_instance()
            clock[0] += timedelta(seconds=min(wait, 300))
        out["firings"][name] = fired
else:
    from beat_schedule.sync import read_beat_schedule
    from beat_schedule.timing import firings_between
    for entry in read_beat_schedule(app.conf, app.tasks).entries:
        planned = firings_between(entry.spec["schedule"], None, START + timedelta(seconds=1),
                                  END, anchor=START, limit=100)
        out["firings"][entry.name] = [f.at.isoformat() for f in planned]
json.dump(out, sys.stdout)
"""


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    package = tmp_path / "proj"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "settings.py").write_text(SETTINGS.format(root=tmp_path))
    (package / "celery.py").write_text(CELERY)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KERNEL_", "CELERY_"))}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.update(PYTHONPATH=str(tmp_path), KERNEL_VAR_DIR=str(tmp_path / "var"))
    return tmp_path, env


def _probe(root: Path, env: dict[str, str], *, stock: bool) -> Any:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=root, env={**env, "PROJ_STOCK": "1" if stock else "0"},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_django_app_keeps_its_zone_and_its_settings(
    project: tuple[Path, dict[str, str]],
) -> None:
    root, env = project
    stock, ours = _probe(root, env, stock=True), _probe(root, env, stock=False)
    assert stock["zone"] == ours["zone"] == "America/Los_Angeles"
    # Midnight in Los Angeles (08:00Z, then 07:00Z after the change), as Celery fires it;
    # the hourly entry skips the missing 02:17, with no extra firing at 03:00.
    assert ours["firings"] == stock["firings"]
    assert stock["firings"]["midnight-report"] == [
        "2026-03-08T08:00:00+00:00", "2026-03-09T07:00:00+00:00"
    ]  # fmt: skip
    assert "2026-03-08T10:00:00+00:00" not in ours["firings"]["hourly-cleanup"]
    # Every setting the project made is Celery's meaning still; only what it left at
    # Celery's default is the kernel's.
    beat_scheduler = ours["conf"].pop("beat_scheduler")
    assert stock["conf"].pop("beat_scheduler") == "celery.beat:PersistentScheduler"
    assert beat_scheduler == "celery_app.beat:KernelScheduler"
    assert ours["conf"] == stock["conf"]
    assert ours["conf"]["task_ignore_result"] is False


#: What Beat does with the app's beat_schedule when it starts.
SYNC = """\
from beat_schedule.sync import read_beat_schedule, sync_beat_schedule
from celery_app.config import open_kernel
from proj.celery import app

kernel = open_kernel(app, migrate=True)
sync_beat_schedule(kernel, read_beat_schedule(app.conf, app.tasks))
kernel.close()
"""


def _kernel(root: Path, env: dict[str, str], *args: str) -> tuple[int, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "proj", "kernel", *args, "--json"],
        cwd=root, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def test_preview_and_why_show_the_zone_and_where_it_came_from(
    project: tuple[Path, dict[str, str]],
) -> None:
    root, env = project
    subprocess.run([sys.executable, "-c", SYNC], cwd=root, env=env, check=True, timeout=120)
    zone = {"name": "America/Los_Angeles", "from": "the app's zone: Django TIME_ZONE"}
    code, preview = _kernel(
        root, env, "jobs", "preview", "midnight-report", "--after", "2026-03-07T09:00:00Z",
        "--next", "2",
    )  # fmt: skip
    assert code == 0 and preview["zone"] == zone
    assert [f["utc"] for f in preview["firings"]] == [
        "2026-03-08T08:00:00Z", "2026-03-09T07:00:00Z"
    ]  # fmt: skip
    code, why = _kernel(root, env, "why", "midnight-report", "--at", "2026-03-08T08:00:00Z")
    assert code == 0 and why["zone"] == zone


def test_doctor_lists_where_each_setting_came_from_and_reports_an_unread_key(
    project: tuple[Path, dict[str, str]],
) -> None:
    root, env = project
    code, report = _kernel(root, env, "doctor")
    assert code == 1 and not report["ok"]
    checks = {(c["name"], c["status"], c["detail"]) for c in report["checks"]}
    assert (
        "zone", "ok", "crontabs read in America/Los_Angeles (Django TIME_ZONE)"
    ) in checks  # fmt: skip
    assert (
        "settings",
        "fail",
        "KERNEL_DATABASE_URL in the app's configuration is not read: the kernel reads "
        "CELERY_KERNEL_DATABASE_URL (or the environment variable KERNEL_DATABASE_URL)",
    ) in checks
    listed = {s["setting"]: s for s in report["settings"]}
    assert listed["CELERY_KERNEL_DATABASE_URL"] == {
        "setting": "CELERY_KERNEL_DATABASE_URL",
        "value": f"sqlite:///{root}/proj.db",
        "source": "app configuration",
    }
    assert listed["kernel_beat_interval"]["source"] == "default"
    assert listed["timezone"]["value"] == "America/Los_Angeles"
    assert listed["beat_scheduler"]["source"] == "kernel default (the app left Celery's)"
