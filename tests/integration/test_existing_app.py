"""An existing Celery project moves onto the kernel: its own app module, config module
and tasks module (written here, not the project's), ``install(app)``, and real
``celery -A myproj worker|beat|kernel`` processes started from the project's
directory with no PYTHONPATH, as a user would.

One worker and one Beat serve every check: task time limits and the job timeout
through Celery's own limits, autoretry settings as the kernel's retry, safe points
for task bodies (pause, resume, cancel), pause refused for a task without them,
colliding and unusable entries shown by ``kernel doctor``/``status``, and a removed
entry's job retired when Beat restarts.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from integration.stack import Proc, Stack

pytestmark = pytest.mark.long

APP = """\
from celery import Celery
from celery_app import install

app = Celery("myproj")
app.config_from_envvar("CELERY_CONFIG_MODULE")
install(app)
"""

SETTINGS = """\
from datetime import timedelta
from celery.schedules import crontab, schedule

class OwnRules(schedule):  # decides is_due its own way: not representable
    pass

broker_url = "filesystem://"
broker_transport_options = {{
    "data_folder_in": "var/broker/q", "data_folder_out": "var/broker/q",
    "control_folder": "var/broker/c", "store_processed": False,
}}
imports = ["myproj_tasks"]
kernel_rehint_after = 1.0
timezone = "Europe/Berlin"
HOUR = timedelta(days=7)  # never due while the test runs
beat_schedule = {{
    "slow": {{"task": "myproj.slow", "schedule": HOUR, "args": [6]}},
    "flaky": {{"task": "myproj.flaky", "schedule": HOUR}},
    "steps": {{"task": "myproj.steps", "schedule": HOUR}},
    "plain": {{"task": "myproj.plain", "schedule": HOUR}},
    "first-monday": {{"task": "myproj.plain",
                      "schedule": crontab(minute=0, hour=9, day_of_month="1-7",
                                          day_of_week="monday")}},
    "own-rules": {{"task": "myproj.plain", "schedule": OwnRules(60)}},
    "cleanup tmp": {{"task": "myproj.plain", "schedule": HOUR}},
    "cleanup-tmp": {{"task": "myproj.plain", "schedule": HOUR}},
{extra}}}
"""

TASKS = """\
import json, os, time
from celery_app import current_run
from myproj import app

def note(**fields):
    with open("ledger.jsonl", "a") as ledger:
        ledger.write(json.dumps(fields) + "\\n")

@app.task(name="myproj.slow", soft_time_limit=2)
def slow(seconds):
    note(task="slow")
    time.sleep(seconds)
    note(task="slow-finished")

@app.task(name="myproj.flaky", autoretry_for=(ValueError,), max_retries=1, retry_backoff=1)
def flaky():
    note(task="flaky")
    raise ValueError("not yet")

@app.task(name="myproj.steps", kernel_checkpoints=True)
def steps():
    start = (current_run.resumed or {}).get("done", 0)
    note(task="steps", start=start)
    # 1,200 steps of 0.1 s: it is paused and cancelled long before it could finish,
    # however slowly the CLIs start on a busy machine.
    for done in range(start, 1200):
        current_run.checkpoint({"done": done})
        time.sleep(0.1)
    return {"done": 1200, "resumed_from": start}

@app.task(name="myproj.plain")
def plain():
    note(task="plain")
    time.sleep(20)  # long enough for a CLI to start and pause it on a busy machine
"""


class Project:
    """The user's project directory and the ``celery -A myproj`` processes run in it."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.root = stack.root
        env = {k: v for k, v in stack.env.items() if k not in ("PYTHONPATH", "KERNEL_JOBS_FILE")}
        env["CELERY_CONFIG_MODULE"] = "myproj_settings"
        self.env = env
        (self.root / "myproj.py").write_text(APP)
        (self.root / "myproj_tasks.py").write_text(TASKS)
        self.write_settings(extra='    "going": {"task": "myproj.plain", "schedule": HOUR},\n')

    def write_settings(self, *, extra: str = "") -> None:
        (self.root / "myproj_settings.py").write_text(SETTINGS.format(extra=extra))

    def start(self, name: str, *args: str) -> Proc:
        proc = Proc(
            name,
            [sys.executable, "-m", "celery", "-A", "myproj", *args],
            cwd=self.root,
            env=self.env,
        )
        self.stack.procs.append(proc)
        return proc

    def start_beat(self, name: str) -> Proc:
        proc = self.start(name, "beat", "-s", str(self.root / f"{name}-schedule"), "-l", "INFO")
        self.stack.wait(
            lambda: any(f":{proc.pid}:" in b.id for b in self.stack.kernel.beats()),
            timeout=30,
            what=f"{name} heartbeat",
        )
        return proc

    def kernel_cli(self, *args: str) -> tuple[int, Any]:
        """``celery -A myproj kernel ARGS --json`` from the project directory: (exit code, JSON)."""
        done = subprocess.run(
            [str(Path(sys.executable).with_name("celery")), "-A", "myproj", "kernel", *args],
            cwd=self.root,
            env=self.env,
            timeout=60,
            capture_output=True,
            text=True,
        )
        assert "Traceback" not in done.stderr, done.stderr
        return done.returncode, json.loads(done.stdout)

    def ledger(self, task: str) -> list[dict[str, Any]]:
        path = self.root / "ledger.jsonl"
        lines = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
        return [line for line in lines if line["task"] == task]

    def run_now(self, job_id: str) -> int:
        code, data = self.kernel_cli("jobs", "run-now", job_id, "--json")
        assert code == 0, data
        return int(data["occurrence"]["id"])


def test_an_existing_app_keeps_its_meaning_on_the_kernel(stack: Stack) -> None:
    project = Project(stack)
    stack.database_url = f"sqlite:///{stack.root / 'var' / 'kernel.db'}"
    worker = project.start("worker", "worker", "-c", "4", "-l", "INFO", "--without-mingle",
                           "--without-gossip")  # fmt: skip
    stack.wait(lambda: "ready." in worker.log(), timeout=30, what="worker ready")
    beat = project.start_beat("beat")

    jobs = {job.id: job for job in stack.kernel.list_jobs()}
    # Entries Celery's Beat would run, as jobs; the refused ones are not.
    assert set(jobs) == {"slow", "flaky", "steps", "plain", "first-monday", "going"}
    assert jobs["first-monday"].spec["schedule"] == {
        "cron": "0 9 1-7 * 1", "timezone": "Europe/Berlin", "day_match": "all"
    }  # fmt: skip
    assert (jobs["slow"].spec["timeout"], jobs["slow"].spec["max_attempts"]) == (2.0, 4)
    assert jobs["flaky"].spec["max_attempts"] == 2
    code, doctor = project.kernel_cli("doctor", "--json")
    problems = [c["detail"] for c in doctor["checks"] if c["name"] == "schedule"]
    assert any("'cleanup tmp' and 'cleanup-tmp'" in p for p in problems), problems
    assert any("own-rules" in p and "OwnRules" in p for p in problems), problems
    code, status = project.kernel_cli("status", "--json")
    assert code == 0 and {r["entry"] for r in status["refused_entries"]} == {
        "cleanup tmp", "cleanup-tmp", "own-rules"
    }  # fmt: skip

    slow, flaky, steps, plain = (project.run_now(j) for j in ("slow", "flaky", "steps", "plain"))
    stack.wait(lambda: project.ledger("steps") and project.ledger("plain"), timeout=20,
               what="steps and plain started")  # fmt: skip

    # A task body that never reaches a safe point cannot be paused while it runs ...
    code, refused = project.kernel_cli("pause", str(plain), "--json")
    assert code == 1 and refused["error"]["code"] == "PAUSE_UNSUPPORTED", refused
    assert "myproj.plain" in refused["error"]["message"]
    # ... one that checkpoints is paused there and resumes from its checkpoint.
    code, asked = project.kernel_cli("pause", str(steps), "--json")
    assert code == 0 and asked["occurrence"]["control"]["state"] == "pause_requested", asked
    paused = stack.wait(
        lambda: (o := stack.occurrence(steps)).control and o.control.state.value == "paused" and o,
        timeout=15,
        what="steps paused",
    )
    handed_at = paused.checkpoint["done"]
    code, resumed = project.kernel_cli("resume", str(steps), "--json")
    assert code == 0, resumed
    stack.wait(lambda: len(project.ledger("steps")) == 2, timeout=15, what="steps resumed")
    assert project.ledger("steps")[1]["start"] == handed_at
    code, cancelled = project.kernel_cli("cancel", str(steps), "--json")
    assert code == 0 and "next safe point" in cancelled["note"], cancelled
    stack.wait(lambda: stack.occurrence(steps).status.value == "cancelled", timeout=15,
               what="steps cancelled at a safe point")  # fmt: skip

    # The soft time limit stops the body: a TIMEOUT failure, final as Celery's task (its
    # four attempts are for self.retry()).
    stack.wait(lambda: stack.settled("slow"), timeout=20, what="slow settled")
    timed_out = stack.occurrence(slow)
    assert timed_out.status.value == "dead_letter" and timed_out.last_error["code"] == "TIMEOUT"
    assert timed_out.attempt == 1
    assert project.ledger("slow-finished") == []
    # autoretry_for: retried by the kernel (max_retries=1 -> 2 attempts), never by Celery.
    stack.wait(lambda: stack.settled("flaky"), timeout=20, what="flaky settled")
    assert stack.occurrence(flaky).attempt == 2 and len(project.ledger("flaky")) == 2
    stack.wait(lambda: stack.settled("plain"), timeout=20, what="plain finished")
    assert stack.occurrence(plain).status.value == "succeeded"

    # A removed entry's job is disabled when Beat starts again, with an event and a log line.
    beat.expected_exit = True
    beat.terminate()
    beat.reap(time.monotonic() + 20)
    project.write_settings()
    revisions = {job.id: job.revision for job in stack.kernel.list_jobs()}
    restarted = project.start_beat("beat-2")
    stack.wait(lambda: restarted.logged("job going disabled"), timeout=15, what="retire logged")
    after = {job.id: job for job in stack.kernel.list_jobs()}
    assert not after["going"].enabled and after["plain"].enabled
    assert {job_id: job.revision for job_id, job in after.items()} == revisions, "no churn"
    assert "job_retired" in [e.type for e in stack.kernel.events(job_id="going", limit=50)]
