"""A moved app's Beat entry, with no kernel options, survives the death of its worker
(issue 38 case 4).

An own app (its own module, not ``celery_app``) with a plain ``beat_schedule`` entry and
a task of ``max_retries=0``, as a team moves it: one attempt, the default lease, no
``kernel`` key. Its worker is SIGKILLed mid-run (the whole process tree, as a lost host);
another worker of the queue reclaims the run after the lease, and it succeeds on the
attempt it had: a lost worker is not the task's failure. The entry's next firing after
that runs. Only the kernel side is run here.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from integration.stack import Proc, Stack

pytestmark = pytest.mark.long

APP = """\
import json, os, time
from celery import Celery
from celery_app import install

app = Celery("mover")
# The app's own routing, which the kernel keeps: its default queue is this test's.
app.conf.task_default_queue = os.environ["MOVER_QUEUE"]
app.conf.beat_schedule = {"report": {"task": "mover.report", "schedule": 20.0}}
install(app)


def note(**fields):
    with open(os.environ["MOVER_LEDGER"], "a") as ledger:
        ledger.write(json.dumps({**fields, "pid": os.getpid(), "at": time.time()}) + "\\n")


@app.task(name="mover.report", max_retries=0)
def report():
    first = not os.path.exists(os.environ["MOVER_MARK"])
    note(event="started", first=first)
    if first:  # the run whose worker is killed: long enough to be killed mid-run
        open(os.environ["MOVER_MARK"], "w").close()
        time.sleep(600)
    note(event="finished")
    return "reported"
"""

JOB = "report"


def _env(stack: Stack, project: Path) -> dict[str, str]:
    env = {k: v for k, v in stack.env.items() if k != "CELERY_CONFIG_MODULE"}
    env.update(
        PYTHONPATH=str(project),
        MOVER_QUEUE=f"mover-{uuid.uuid4().hex[:10]}",
        MOVER_LEDGER=str(stack.ledger_path),
        MOVER_MARK=str(project / "first-run"),
        KERNEL_DATABASE_URL=stack.database_url,
    )
    return env


def _start(stack: Stack, name: str, project: Path, env: dict[str, str], *args: str) -> Proc:
    argv = [sys.executable, "-m", "celery", "-A", "mover", *args, "-l", "INFO"]
    proc = Proc(name, argv, cwd=project, env=env)
    stack.procs.append(proc)
    return proc


def _worker(stack: Stack, name: str, project: Path, env: dict[str, str]) -> Proc:
    proc = _start(stack, name, project, env, "worker", "-c", "1", "-n", f"{name}@%h",
                  "-Q", env["MOVER_QUEUE"], "--without-mingle", "--without-gossip")  # fmt: skip
    stack.wait(lambda: proc.logged("ready."), timeout=60, what=f"worker {name} ready")
    return proc


@pytest.mark.parametrize("stack", ["redis", "redis+postgres"], indirect=True)
def test_a_killed_workers_run_of_a_moved_entry_is_reclaimed_on_its_one_attempt(
    stack: Stack,
) -> None:
    project = stack.root / "mover"
    project.mkdir()
    (project / "mover.py").write_text(APP)
    env = _env(stack, project)
    doomed = _worker(stack, "doomed", project, env)
    _start(stack, "beat", project, env, "beat", "-s", str(project / "beat-schedule"))
    [first] = stack.wait(lambda: stack.ledger(event="started"), timeout=60, what="first run")
    assert first["first"] and doomed.owns(first["pid"]), first
    [occ] = [o for o in stack.occurrences(JOB) if o.status.value == "running"]
    assert (occ.max_attempts, occ.definition.get("lease")) == (1, 60.0), occ
    survivor = _worker(stack, "survivor", project, env)

    assert len(doomed.crash()) >= 2, "the pool child was not killed with its parent"
    # After the default 60 s lease, the survivor reclaims it (no kernel option asked).
    stack.wait(lambda: _status(stack, occ.id) == "succeeded", timeout=150,
               what="the reclaimed run succeeded")  # fmt: skip
    done = stack.kernel.get_occurrence(occ.id)
    # The attempt was not spent: the same one attempt, a new fence (another lease).
    assert (done.attempt, done.fence, done.result) == (1, 2, "reported"), done
    finished = stack.ledger(event="finished")
    assert finished and survivor.owns(finished[0]["pid"]), finished
    claims = [e for e in stack.event_types(occ.id) if e[0] == "occurrence_claimed"]
    assert claims == [("occurrence_claimed", 1), ("occurrence_claimed", 2)], claims

    # The next firing after the reclaimed run settled is run, not skipped.
    settled_at = done.settled_at
    assert settled_at is not None

    def later_run() -> Any:
        return [o for o in stack.occurrences(JOB)
                if o.scheduled_for > settled_at and o.status.value == "succeeded"]  # fmt: skip

    stack.wait(later_run, timeout=60, what="the next firing's run")
    assert len(stack.ledger(event="finished")) >= 2


def _status(stack: Stack, occurrence_id: int) -> str:
    return stack.kernel.get_occurrence(occurrence_id).status.value
