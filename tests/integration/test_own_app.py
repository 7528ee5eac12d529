"""A user's own app (its own module, not ``celery_app``) on the embedded defaults.

``install(app)`` on an app that names no broker, or names ``filesystem://``, runs on
the embedded broker under ``KERNEL_VAR_DIR``; the default SQLite kernel lives in the
project's directory, so a Beat started from another directory fires into the same
kernel, and every process prints its absolute path. The tutorial
(``docs/tutorial.md``) is followed as written: its files and commands are read from
the page, whose code blocks each carry a ``<!-- test: ROLE -->`` mark.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest
from integration.stack import Proc, Stack
from web.support import console_login

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


TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorial.md"
#: A mark, then the fenced block it is about; every block of the page must carry one.
_MARKED_BLOCK = re.compile(r"<!-- test: (\S+)[^>]*-->\n```\w+\n(.*?)\n```", re.DOTALL)
_LISTENING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")


def _tutorial_blocks() -> list[tuple[str, str]]:
    """(role, text) of each code block of the tutorial, in page order."""
    page = TUTORIAL.read_text()
    blocks = _MARKED_BLOCK.findall(page)
    assert len(blocks) * 2 == page.count("\n```"), "a code block of the tutorial has no test mark"
    return blocks


def _commands(block: str) -> list[str]:
    return [line for line in block.splitlines() if line.strip()]


def test_the_tutorial_runs_as_written(stack: Stack) -> None:
    blocks = _tutorial_blocks()
    roles = [role for role, _ in blocks]
    assert roles == ["install", "file", "file", "file", "start", "check", "example", "pause",
                     "console"], roles  # fmt: skip
    project = stack.root / "myproj"
    project.mkdir()
    # The reader's shell: this virtualenv activated, nothing of the suite's settings.
    env = {k: v for k, v in stack.env.items()
           if k not in ("CELERY_CONFIG_MODULE", "KERNEL_BEAT_INTERVAL", "PYTHONPATH")}  # fmt: skip
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    stack.database_url = f"sqlite:///{project / 'var' / 'kernel.db'}"
    steps = iter(blocks[1:])

    def run(command: str) -> str:
        done = _run_printed(command, project, env)
        assert done.returncode == 0 and "Traceback" not in done.stderr, (command, done)
        return done.stdout

    def start(name: str, command: str) -> Proc:
        proc = Proc(name, ["/bin/sh", "-c", f"exec {command}"], cwd=project, env=env)
        stack.procs.append(proc)
        return proc

    # 2. The project's files, as the page shows them.
    for _ in range(3):
        _, text = next(steps)
        name = text.splitlines()[0].removeprefix("# ").strip()
        (project / name).write_text(text + "\n")
    # 3. Worker and Beat, then the operator CLI.
    worker_command, beat_command = _commands(next(steps)[1])
    worker = start("worker", worker_command)
    start("beat", beat_command)
    stack.wait(lambda: worker.logged("ready."), timeout=40, what="worker ready")
    for command in _commands(next(steps)[1]):
        run(command)
    next(steps)  # 4. another project's settings: an example, not a step

    # 5. Beat fires `import`; pause the run under way, then resume it.
    def running() -> int | None:
        found = stack.kernel.list_occurrences(job_id="import", statuses=["running"])
        return found[0].id if found else None

    occurrence_id = stack.wait(running, timeout=30, what="a firing of import running")
    listing, pause, paused_listing, resume, why = (
        re.sub(r"\b42\b", str(occurrence_id), command) for command in _commands(next(steps)[1])
    )
    assert re.search(rf"^\s*{occurrence_id}\b", run(listing), re.MULTILINE)
    run(pause)
    stack.wait(lambda: stack.occurrence(occurrence_id).control.state == "paused",
               timeout=20, what="the run paused at a checkpoint")  # fmt: skip
    assert re.search(rf"^\s*{occurrence_id}\b", run(paused_listing), re.MULTILINE)
    assert stack.occurrence(occurrence_id).checkpoint["row"] > 0
    run(resume)
    story = run(why)
    assert "paused" in story and "resume" in story, story

    # 6. The console: a user, the server, a real sign-in and the overview.
    users_add, web_command = _commands(next(steps)[1])
    token = re.search(r"^token\s+(\S+)", run(users_add), re.MULTILINE)
    assert token, "kernel users add printed no token"
    web = start("web", f"{web_command.partition('#')[0].strip()} --port 0")
    port = stack.wait(lambda: _LISTENING.search(web.log()), timeout=30, what="the console").group(1)
    with closing(console_login(f"http://127.0.0.1:{port}", "alice", token.group(1))) as client:
        stack.wait(lambda: _names_job(client.get("/"), "import"), timeout=20,
                   what="the overview naming import")  # fmt: skip

    # Resumed, it is claimed again in the same attempt (its claim carries the checkpoint).
    def claimed_again() -> bool:
        again = stack.occurrence(occurrence_id)
        assert again.attempt == 1, again
        return ("occurrence_claimed", 2) in stack.event_types(occurrence_id)

    stack.wait(claimed_again, timeout=20, what="the resumed run claimed again")


def _names_job(page: httpx.Response, job_id: str) -> bool:
    """Whether a console page (which must have answered 200) shows ``job_id`` in a cell."""
    assert page.status_code == 200, page.text
    return re.search(rf">\s*{re.escape(job_id)}\s*<", page.text) is not None
