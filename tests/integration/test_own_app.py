"""A user's own app (its own module, not ``celery_app``) on the embedded defaults.

``install(app)`` on an app that names no broker, or names ``filesystem://``, runs on
the embedded broker under ``KERNEL_VAR_DIR``; the default SQLite kernel lives in the
project's directory, so a Beat started from another directory fires into the same
kernel, and every process prints its absolute path.
"""

from __future__ import annotations

import json
import os
import re
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
    env.update(PYTHONPATH=str(project), SHOP_LEDGER=str(stack.ledger_path), PATH=_PATH)
    if broker_url:
        env["CELERY_BROKER_URL"] = broker_url
    stack.database_url = f"sqlite:///{project / 'var' / 'kernel.db'}"
    return project, elsewhere, env


#: PATH with no ``celery`` on it (as outside an activated virtualenv): hints must still run.
_PATH = os.pathsep.join(
    d for d in os.environ.get("PATH", os.defpath).split(os.pathsep)
    if d and not Path(d, "celery").exists()
)  # fmt: skip


def _run_printed(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run a command exactly as a hint printed it, through a shell."""
    return subprocess.run(["/bin/sh", "-c", command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


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
    assert not database.exists() and not (elsewhere / "var").exists()
    # The hint runs as printed, from anywhere, with this virtualenv not on PATH.
    hint = re.search(r"`([^`]*-A shop kernel migrate)`", refused["error"]["message"])
    assert hint, refused
    migrated = _run_printed(hint.group(1), elsewhere, env)
    assert migrated.returncode == 0, migrated.stderr
    assert database.is_file() and not (elsewhere / "var").exists()

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


def test_the_demo_prints_commands_that_run_as_printed(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CELERY_", "KERNEL_"))}
    env["PATH"] = _PATH
    demo = subprocess.run(
        [sys.executable, "-m", "celery_app.demo", "--seconds", "3"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    printed = demo.stdout.partition("inspect this kernel with:")[2].strip().splitlines()
    assert len(printed) == 3, demo.stdout + demo.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for command in printed:
        done = _run_printed(command.strip(), elsewhere, env)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
