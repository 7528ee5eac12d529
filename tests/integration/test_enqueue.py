"""Enqueue end to end (issue 27): a project's own app, its client process, real workers.

In one project (``install(app)``, ``kernel_route_tasks = ["myproj.routed"]``), on the
embedded broker with SQLite and on Redis with PostgreSQL:

* an enqueue inside a rolled-back transaction leaves no occurrence and nothing runs; the
  same key inside a committed one runs exactly once, and ``result()`` returns its value;
* a plain ``.delay()`` of a routed task goes through the kernel; its worker is killed
  with SIGKILL mid-run (plain Celery would lose the message, acknowledged on receipt)
  and the run is reclaimed under a higher fence and completed by another worker.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from integration.stack import Proc, Stack

pytestmark = pytest.mark.long

APP = """\
from celery import Celery
from celery_app import install

app = Celery("myproj")
app.config_from_object("myproj_settings")
install(app)
"""

SETTINGS = """\
imports = ["myproj_tasks"]
kernel_route_tasks = ["myproj.routed"]
kernel_rehint_after = 1.0
"""

TASKS = """\
import json, os, time
from myproj import app

def note(**fields):
    with open("ledger.jsonl", "a") as ledger:
        ledger.write(json.dumps({"pid": os.getpid(), **fields}) + "\\n")

@app.task(name="myproj.record")
def record(label):
    note(task="record", label=label)
    return {"recorded": label}

@app.task(name="myproj.routed", kernel_options={"lease": "6s", "max_attempts": 3})
def routed(label):
    note(task="routed", label=label, event="started")
    time.sleep(3)
    note(task="routed", label=label, event="finished")
    return label
"""

#: The head of a project's tasks module whose tasks ``note`` what they did in the ledger
#: :meth:`Project.ledger` reads (one JSON line per ``note``).
NOTING = """\
import json
from myproj import app

def note(**fields):
    with open("ledger.jsonl", "a") as ledger:
        ledger.write(json.dumps(fields) + "\\n")
"""

#: Settings of a project whose ``myproj.routed.*`` tasks go through the kernel and whose
#: ``myproj.stock.*`` tasks do not, on the stack's Redis as broker and result backend:
#: the same canvas measured routed against stock Celery on one app.
ROUTED_AND_STOCK = """\
import os
imports = ["myproj_tasks"]
broker_url = result_backend = os.environ["CELERY_BROKER_URL"]
kernel_route_tasks = ["myproj.routed.*"]
kernel_rehint_after = 1.0
"""

#: The client: an enqueue rolled back, the same key committed, then the run's result.
TRANSACTION = """\
import json, sqlalchemy as sa
from celery_app import enqueue, result
from celery_app.settings import KernelSettings
from myproj import app

engine = sa.create_engine(KernelSettings.from_app(app).database_url)
with engine.connect() as conn:
    trans = conn.begin()
    rolled = enqueue(app, "myproj.record", ["rolled-back"], key="order-1", connection=conn)
    trans.rollback()
with engine.begin() as conn:
    made = enqueue(app, "myproj.record", ["committed"], key="order-1", connection=conn)
value = result(app, made.occurrence_id, timeout=60)
print(json.dumps({"rolled": rolled.occurrence_id, "made": made.occurrence_id, "value": value}))
"""

ROUTED = """\
import json
from myproj_tasks import routed
sent = routed.delay("plain-delay")
print(json.dumps({"id": sent.id}))
"""


class Project:
    """The project directory: its app, settings and tasks, and processes started there."""

    def __init__(self, stack: Stack, *, settings: str = SETTINGS, tasks: str = TASKS) -> None:
        self.stack = stack
        self.env = {k: v for k, v in stack.env.items() if k not in ("PYTHONPATH",)}
        self.env.pop("CELERY_CONFIG_MODULE", None)
        for name, text in (("myproj", APP), ("myproj_settings", settings), ("myproj_tasks", tasks)):
            (stack.root / f"{name}.py").write_text(text)

    def start(self, name: str, *args: str) -> Proc:
        proc = Proc(name, [sys.executable, "-m", "celery", "-A", "myproj", *args],
                    cwd=self.stack.root, env=self.env)  # fmt: skip
        self.stack.procs.append(proc)
        return proc

    def worker(self, name: str, concurrency: int = 1) -> Proc:
        proc = self.start(name, "worker", "-c", str(concurrency), "-n", f"{name}@%h", "-l",
                          "INFO", "--without-mingle", "--without-gossip")  # fmt: skip
        self.stack.wait(lambda: "ready." in proc.log(), timeout=30, what=f"{name} ready")
        return proc

    def beat(self) -> Proc:
        """Beat: its pump also hints the runs a settle makes (a chain's next step, a
        chord's body, an errback, a replacement) and those held back until due."""
        return self.start("beat", "beat", "-s", str(self.stack.root / "beat-schedule"),
                          "-l", "INFO")  # fmt: skip

    @classmethod
    def running(
        cls, stack: Stack, tasks: str, *, settings: str = ROUTED_AND_STOCK,
        workers: tuple[str, ...] = ("w1",), concurrency: int = 1,
    ) -> tuple[Project, list[Proc]]:  # fmt: skip
        """A project of ``tasks`` with its ``workers`` ready, then its Beat."""
        project = cls(stack, settings=settings, tasks=tasks)
        started = [project.worker(name, concurrency) for name in workers]
        project.beat()
        return project, started

    def client(self, code: str) -> Any:
        done = subprocess.run([sys.executable, "-c", code], cwd=self.stack.root, env=self.env,
                              timeout=90, capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.splitlines()[-1])

    def ledger(self, **match: Any) -> list[dict[str, Any]]:
        path = self.stack.root / "ledger.jsonl"
        lines = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
        return [x for x in lines if all(x.get(k) == v for k, v in match.items())]


@pytest.mark.parametrize("stack", ["embedded", "redis+postgres"], indirect=True)
def test_enqueue_is_transactional_and_a_routed_delay_survives_a_killed_worker(
    stack: Stack,
) -> None:
    project = Project(stack)
    first = project.worker("w1")
    beat = project.beat()

    # Rolled back: nothing; committed (same key): one run, its result without a backend.
    answer = project.client(TRANSACTION)
    assert answer["value"] == {"recorded": "committed"}
    assert [o.id for o in stack.occurrences("task:myproj.record")] == [answer["made"]]
    assert [x["label"] for x in project.ledger(task="record")] == ["committed"]

    # A plain .delay() of a routed task: an occurrence, claimed by the first worker ...
    task_id = project.client(ROUTED)["id"]
    [routed] = stack.occurrences("task:myproj.routed")
    assert routed.trigger_key == f"key:{task_id}"  # the caller's AsyncResult id is its key
    sent = routed.id
    started = stack.wait(lambda: project.ledger(task="routed", event="started"), timeout=30,
                         what="routed run started")  # fmt: skip
    assert started[0]["pid"] in first.children() or started[0]["pid"] == first.pid
    first.crash()  # SIGKILL mid-run: its hint was acknowledged when received
    project.worker("w2")
    done = stack.wait(
        lambda: (o := stack.occurrence(sent)).status.value == "succeeded" and o,
        timeout=60,
        what="the routed run reclaimed and completed",
    )
    assert done.fence == 2 and done.result == "plain-delay"
    assert len(project.ledger(task="routed", event="started")) == 2
    assert len(project.ledger(task="routed", event="finished")) == 1
    assert [x["label"] for x in project.ledger(task="record")] == ["committed"]  # still once
    assert beat.popen.poll() is None
