"""A routed run that ends without its worker still answers its caller (issue 40), and a
run killed on its last attempt notifies its job once (issue 39 item 4).

One project on Redis (broker and result backend), ``install(app)``, every
``rproj.routed.*`` task through the kernel with a 5 s lease and no lost lease allowed. A
worker running two routed calls is SIGKILLed with its pool: Beat expires both leases,
the at-least-once run becomes a dead letter (``POISON_PILL``), the at-most-once one
waits for a verdict, and an operator abandons it. A third call, due in an hour, is
cancelled while queued. Each caller's ``AsyncResult`` then ends as Celery would show it
(FAILURE with :class:`celery_app.enqueueing.RunFailed` naming the kernel's code, or
REVOKED), delivered by a second worker from the row the kernel wrote with each end; and
the job's ``notify`` task hears of each failure once.

Before, the caller waited for ever (PENDING): only a worker's body wrote the backend;
and up to 1018d88 a notification was written by the worker after its settle, so a run
whose worker was killed notified nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from integration.stack import Proc, Stack

pytestmark = pytest.mark.long

APP = """\
from celery import Celery
from celery_app import install

app = Celery("rproj")
app.config_from_object("rproj_settings")
install(app)
"""

SETTINGS = """\
import os
imports = ["rproj_tasks"]
broker_url = result_backend = os.environ["CELERY_BROKER_URL"]
kernel_route_tasks = ["rproj.routed.*"]
kernel_rehint_after = 1.0
"""

TASKS = """\
import json, os, time
from rproj import app

QUEUE = os.environ["RPROJ_QUEUE"]  # this test's own, on the session's Redis
HERE = os.path.dirname(os.path.abspath(__file__))
NOTIFY = {"task": "rproj.notified", "on": ["dead_letter", "needs_adjudication"]}
ONCE = {"lease": "5s", "max_lost_leases": 0, "notify": NOTIFY}

def _line(name, record):
    with open(os.path.join(HERE, name), "a") as out:
        out.write(json.dumps(record) + "\\n")

def hang(self):
    _line("running.jsonl", {"id": self.request.id, "pid": os.getpid()})
    time.sleep(600)

def later():
    return "never"

def notified(notification):
    _line("notified.jsonl", notification)

app.task(name="rproj.routed.hang", bind=True, queue=QUEUE, shared=False,
         kernel_options=ONCE)(hang)
app.task(name="rproj.routed.hang_once", bind=True, queue=QUEUE, shared=False,
         kernel_options={**ONCE, "delivery": "at-most-once"})(hang)
app.task(name="rproj.routed.later", queue=QUEUE, shared=False)(later)
app.task(name="rproj.notified", queue=QUEUE, shared=False)(notified)
"""

#: The calls, as a Celery user makes them; prints their task ids.
CALL = """\
import json
from rproj import app
app.loader.import_default_modules()
ids = {name: app.tasks[f"rproj.routed.{name}"].apply_async(**options).id
       for name, options in (("hang", {}), ("hang_once", {}), ("later", {"countdown": 3600}))}
print(json.dumps(ids))
"""

#: Stands in for Beat's pass over overdue notifications (once a minute, for those older
#: than a minute): hints what an operator's verdict and cancel owe. Then reads each
#: result as a Celery user does.
READ = """\
import json, sys
from celery.result import AsyncResult
from celery_app import notify
from celery_app.config import open_kernel
from rproj import app
app.loader.import_default_modules()
notify.rehint_overdue(app, open_kernel(app), overdue_for=0.0)
out = {}
for name, task_id in json.loads(sys.argv[1]).items():
    result = AsyncResult(task_id, app=app)
    value = result.get(timeout=60, propagate=False)
    out[name] = {"status": result.status, "type": type(value).__name__, "text": str(value),
                 "code": getattr(value, "code", None)}
print(json.dumps(out))
"""


def _client(stack: Stack, env: dict[str, str], script: str, *args: str) -> Any:
    done = subprocess.run([sys.executable, "-c", script, *args], cwd=stack.root, env=env,
                          timeout=300, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _worker(stack: Stack, env: dict[str, str], name: str, concurrency: int) -> Proc:
    node = f"{name}-{stack.queue}"
    worker = Proc(name, [sys.executable, "-m", "celery", "-A", "rproj", "worker", "-n",
                         f"{node}@%h", "-c", str(concurrency), "-Q", stack.queue, "-l", "INFO",
                         "--without-mingle", "--without-gossip"],
                  cwd=stack.root, env=env)  # fmt: skip
    stack.procs.append(worker)
    stack.wait(lambda: f"{node}@" in worker.log() and "ready." in worker.log(), timeout=30,
               what=f"worker {name} ready")  # fmt: skip
    return worker


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_runs_ended_without_their_worker_answer_their_callers_and_notify_once(
    stack: Stack,
) -> None:
    for name, text in (("rproj", APP), ("rproj_settings", SETTINGS), ("rproj_tasks", TASKS)):
        (stack.root / f"{name}.py").write_text(text)
    env = {k: v for k, v in stack.env.items() if k != "CELERY_CONFIG_MODULE"}
    env["RPROJ_QUEUE"] = stack.queue
    doomed = _worker(stack, env, "doomed", 2)
    beat = Proc("beat", [sys.executable, "-m", "celery", "-A", "rproj", "beat", "-s",
                         str(stack.root / "beat-schedule"), "-l", "INFO"],
                cwd=stack.root, env=env)  # fmt: skip
    stack.procs.append(beat)

    ids: dict[str, str] = _client(stack, env, CALL)
    running = stack.root / "running.jsonl"
    stack.wait(lambda: len(_lines(running)) == 2, timeout=30, what="both routed runs running")
    assert all(doomed.owns(run["pid"]) for run in _lines(running))
    assert len(doomed.crash()) >= 3, "the pool children were not killed with their parent"
    _worker(stack, env, "survivor", 1)

    def occurrence(name: str) -> Any:
        [occ] = stack.occurrences(f"task:rproj.routed.{name}")
        assert occ.trigger_key == f"key:{ids[name]}"
        return occ

    stack.wait(lambda: occurrence("hang").status.value == "dead_letter", timeout=60,
               what="the lost lease's dead letter")  # fmt: skip
    stack.wait(lambda: occurrence("hang_once").status.value == "needs_adjudication",
               timeout=60, what="the at-most-once run's adjudication")  # fmt: skip
    request = uuid.uuid4().hex
    stack.kernel.adjudicate(occurrence("hang_once").id, decision="abandon",
                            request_id=request, operator="ops")  # fmt: skip
    stack.kernel.cancel(occurrence("later").id, request_id=request + "c", operator="ops")

    out = _client(stack, env, READ, json.dumps(ids))
    assert out["hang"]["status"] == out["hang_once"]["status"] == "FAILURE"
    assert out["hang"]["type"] == out["hang_once"]["type"] == "RunFailed"
    assert out["hang"]["code"] == "POISON_PILL" and "POISON_PILL" in out["hang"]["text"]
    assert out["hang_once"]["code"] == "ABANDONED" and "by ops" in out["hang_once"]["text"]
    assert out["later"]["status"] == "REVOKED"
    assert out["later"]["type"] == "TaskRevokedError" and "cancelled" in out["later"]["text"]

    # The job's notify heard of each failure once, though no worker settled either run.
    expected = sorted(
        [(occurrence("hang").id, "dead_letter"), (occurrence("hang_once").id, "needs_adjudication"),
         (occurrence("hang_once").id, "dead_letter")]
    )  # fmt: skip
    notified = stack.root / "notified.jsonl"
    stack.wait(lambda: len(_lines(notified)) >= len(expected), timeout=60,
               what="the notifications delivered")  # fmt: skip
    heard = sorted((n["occurrence_id"], n["event"]) for n in _lines(notified))
    assert heard == expected
    for name in ("hang", "hang_once"):
        events = [e[0] for e in stack.event_types(occurrence(name).id)]
        assert "occurrence_claimed" in events and "occurrence_succeeded" not in events
