"""What Beat refuses or keeps changing in an own app's ``beat_schedule`` (issue 38, item 10).

Entries the kernel would refuse when Beat applies them (an interval under 1 s, a
``datetime`` or a ``set`` argument) are refused when the schedule is read, so
``doctor`` (exit 1) and ``status`` list them, each saying whether its job still fires
a previous definition. An entry whose schedule is drawn at import (a random minute)
differs from its job at every start: ``doctor`` says so and points to ``jitter``.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from cli.conftest import CELERY

from beat_schedule.sync import read_beat_schedule, sync_beat_schedule
from kernel import Kernel

SHOP = """\
import random
from datetime import datetime
from celery import Celery
from celery.schedules import crontab
from celery_app import install

app = Celery("shop")
app.conf.beat_schedule = {
    "fast": {"task": "shop.t", "schedule": 0.5},
    "dated": {"task": "shop.t", "schedule": 60, "args": [datetime(2026, 1, 1)]},
    "tagged": {"task": "shop.t", "schedule": 60, "kwargs": {"tags": {"a", "b"}}},
    "spread": {"task": "shop.t", "schedule": crontab(minute=random.randrange(60) if
               __import__("os").environ.get("SHOP_RANDOM") else 7)},
    "good": {"task": "shop.t", "schedule": 60},
}
install(app)

@app.task(name="shop.t")
def t(*args, **kwargs):
    pass
"""


def _kernel(tmp_path: Path, db_url: str, *args: str) -> tuple[int, Any]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CELERY_CONFIG_MODULE")}
    env.update(KERNEL_DATABASE_URL=db_url, SHOP_RANDOM="1")
    done = subprocess.run(
        [CELERY, "-A", "shop", "kernel", *args, "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def _noop(*args: Any, **kwargs: Any) -> None:
    pass


@pytest.fixture
def shop(tmp_path: Path, kernel: Kernel) -> Kernel:
    """The shop app's module, and its kernel as an earlier Beat left it: ``fast`` was
    valid then (every minute), ``spread`` fired at minute 7."""
    (tmp_path / "shop.py").write_text(SHOP)
    earlier = {
        "fast": {"task": "shop.t", "schedule": 60},
        "spread": {"task": "shop.t", "schedule": 7 * 60},
        "good": {"task": "shop.t", "schedule": 60},
    }
    app = Celery("shop", set_as_current=False)
    app.task(name="shop.t")(_noop)
    read = read_beat_schedule({"beat_schedule": earlier}, app.tasks)
    sync_beat_schedule(kernel, read, source="beat_schedule:shop")
    return kernel


def test_entries_refused_at_apply_are_refused_when_read_naming_the_entry() -> None:
    from datetime import datetime

    read = read_beat_schedule({"beat_schedule": {
        "fast": {"task": "t", "schedule": 0.5},
        "dated": {"task": "t", "schedule": 60, "args": [datetime(2026, 1, 1)]},
        "tagged": {"task": "t", "schedule": 60, "kwargs": {"tags": {"a"}}},
        "good": {"task": "t", "schedule": 60},
    }})  # fmt: skip
    refused = {e.name: e.refused for e in read.entries if e.refused}
    assert set(refused) == {"fast", "dated", "tagged"}
    assert "beat_schedule['fast']" in str(refused["fast"]) and "1s" in str(refused["fast"])
    assert "datetime" in str(refused["dated"]) and "set" in str(refused["tagged"])
    assert [spec["id"] for spec in read.specs] == ["good"]


def test_doctor_and_status_list_every_refused_entry_and_the_definition_still_firing(
    shop: Kernel, tmp_path: Path, db_url: str
) -> None:
    code, doctor = _kernel(tmp_path, db_url, "doctor")
    assert code == 1 and not doctor["ok"]
    failed = [
        c["detail"] for c in doctor["checks"] if (c["name"], c["status"]) == ("schedule", "fail")
    ]
    assert len(failed) == 3, doctor
    fast = next(d for d in failed if "'fast'" in d)
    assert "job fast still fires its previous definition (revision 1)" in fast
    assert "kernel jobs disable fast" in fast
    assert not any("previous definition" in d for d in failed if "'fast'" not in d)

    code, status = _kernel(tmp_path, db_url, "status")
    assert code == 0
    assert sorted(r["entry"] for r in status["refused_entries"]) == ["dated", "fast", "tagged"]
    assert next(r for r in status["refused_entries"] if r["entry"] == "fast")["fires_revision"] == 1


def test_doctor_points_an_entry_that_changes_at_every_start_to_jitter(
    shop: Kernel, tmp_path: Path, db_url: str
) -> None:
    code, doctor = _kernel(tmp_path, db_url, "doctor")
    changed = [c for c in doctor["checks"] if c["name"] == "schedule" and "'spread'" in c["detail"]]
    assert [c["status"] for c in changed] == ["warn"], doctor
    assert "jitter" in changed[0]["detail"] and "revision 1" in changed[0]["detail"]
    # An entry the kernel holds as written is not reported.
    assert not any("'good'" in c["detail"] for c in doctor["checks"])
    code, status = _kernel(tmp_path, db_url, "status")
    assert [c["entry"] for c in status["changed_entries"]] == ["spread"]


def test_beat_logs_a_refused_entry_with_the_definition_its_job_still_fires(
    kernel: Kernel, caplog: pytest.LogCaptureFixture
) -> None:
    before = {"fast": {"task": "t", "schedule": 60}}
    sync_beat_schedule(kernel, read_beat_schedule({"beat_schedule": before}))
    now = {"fast": {"task": "t", "schedule": 0.5}}
    with caplog.at_level(logging.ERROR, logger="celery_kernel.beat"):
        sync_beat_schedule(kernel, read_beat_schedule({"beat_schedule": now}))
    [record] = [r for r in caplog.records if getattr(r, "action", None) == "entry_refused"]
    assert "job fast still fires its previous definition (revision 1)" in record.getMessage()
    assert kernel.get_job("fast").enabled  # kept as it was: a refusal changes nothing stored
