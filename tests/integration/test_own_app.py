"""A user's own app (its own module, not ``celery_app``) on the embedded defaults.

``install(app)`` on an app that names no broker, or names ``filesystem://``, runs on
the embedded broker under ``KERNEL_VAR_DIR``; the default SQLite kernel lives in the
project's directory, so a Beat started from another directory fires into the same
kernel, and every process prints its absolute path.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from integration.stack import Proc, Stack

pytestmark = pytest.mark.long

APP = """\
import json, os
from celery import Celery
from celery_app import install

app = Celery("shop")
app.conf.beat_schedule = {"tick": {"task": "shop.tick", "schedule": 1.0}}
install(app)

@app.task(name="shop.tick")
def tick():
    with open(os.environ["SHOP_LEDGER"], "a") as ledger:
        ledger.write(json.dumps({"pid": os.getpid()}) + "\\n")
"""


def _project(stack: Stack, broker_url: str | None) -> tuple[Path, Path, dict[str, str]]:
    project, elsewhere = stack.root / "shop", stack.root / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "shop.py").write_text(APP)
    env = {k: v for k, v in stack.env.items() if k not in ("CELERY_CONFIG_MODULE",)}
    env.update(PYTHONPATH=str(project), SHOP_LEDGER=str(stack.ledger_path))
    if broker_url:
        env["CELERY_BROKER_URL"] = broker_url
    stack.database_url = f"sqlite:///{project / 'var' / 'kernel.db'}"
    return project, elsewhere, env


def _celery(*args: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "shop", *args]


def _kernel_json(cwd: Path, env: dict[str, str], *args: str) -> tuple[int, Any]:
    done = subprocess.run(
        _celery("kernel", *args, "--json"), cwd=cwd, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


@pytest.mark.parametrize("broker_url", [None, "filesystem://"], ids=["no-broker", "filesystem"])
def test_own_app_runs_on_the_embedded_defaults_from_any_directory(
    stack: Stack, broker_url: str | None
) -> None:
    project, elsewhere, env = _project(stack, broker_url)
    database = project / "var" / "kernel.db"

    # Before anything created it, a read-only command names the file and how to create it.
    code, refused = _kernel_json(elsewhere, env, "status")
    assert code == 1 and refused["error"]["code"] == "SCHEMA_UNKNOWN", refused
    assert str(database) in refused["error"]["message"]
    assert "-A shop kernel migrate" in refused["error"]["message"], refused
    assert not database.exists() and not (elsewhere / "var").exists()

    worker = Proc("worker", _celery("worker", "-l", "INFO", "-c", "1"), cwd=project, env=env)
    stack.procs.append(worker)
    stack.wait(lambda: worker.logged("ready."), timeout=40, what="worker ready")
    # Beat from another directory: the same kernel, not a second one there.
    beat = Proc("beat", _celery("beat", "-l", "INFO", "-s", str(elsewhere / "sched")),
                cwd=elsewhere, env=env)  # fmt: skip
    stack.procs.append(beat)
    stack.wait(lambda: len(stack.ledger()) >= 2, timeout=40, what="two runs of shop.tick")

    assert database.is_file() and not (elsewhere / "var").exists()
    assert (project / "var" / "broker").is_dir()
    assert f"kernel -> sqlite:///{database}" in beat.log()
    assert str(database) in worker.log()
    code, status = _kernel_json(elsewhere, env, "status")
    assert code == 0 and status["database"] == f"sqlite:///{database}", status
    code, doctor = _kernel_json(elsewhere, env, "doctor")
    settings = next(c for c in doctor["checks"] if c["name"] == "settings")
    assert str(database) in settings["detail"], doctor
