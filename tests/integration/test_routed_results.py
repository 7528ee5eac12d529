"""A routed call's result is Celery's AsyncResult (issue 40), measured against stock Celery.

One project on Redis (broker and result backend), ``install(app)``, its tasks registered
twice from the same bodies: ``rproj.routed.*`` through the kernel (``kernel_route_tasks``)
and ``rproj.stock.*`` published by Celery. A client calls each pair and reads the answers
the way Celery users do (``.get()`` with ``propagate`` on and off, ``.status``,
``.ready()``, ``.successful()``, the exception's type); the routed side must answer as
the stock side does. Also: the id the caller holds is the body's ``self.request.id``, the
same ``task_id`` twice is one run, ``send_task`` of a routed name runs through the kernel,
a non-JSON return value settles (the kernel keeps what it can, saying so) instead of
waiting out its lease, and ``install()`` keeps Celery's ``task_ignore_result`` default.
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
import os
from datetime import UTC, datetime
from rproj import app

QUEUE = os.environ["RPROJ_QUEUE"]  # this test's own, on the session's Redis

class Opaque:
    pass

def add(x, y):
    return x + y

def boom():
    raise KeyError("no such order")

def when():
    return datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

def opaque():
    return Opaque()

def whoami(self):
    return self.request.id

for side in ("routed", "stock"):
    for body in (add, boom, when, opaque):
        app.task(name=f"rproj.{side}.{body.__name__}", queue=QUEUE, shared=False)(body)
    app.task(name=f"rproj.{side}.whoami", bind=True, queue=QUEUE, shared=False)(whoami)
"""

#: The client: each call on both sides, read as a Celery user reads a result.
CLIENT = """\
import json, uuid
from rproj import app
app.loader.import_default_modules()

def read(result):
    value = result.get(timeout=60, propagate=False)
    try:
        result.get(timeout=60)
        raised = None
    except Exception as exc:
        raised = type(exc).__name__
    return {"status": result.status, "ready": result.ready(), "ok": result.successful(),
            "value": repr(value), "raised": raised, "type": type(result).__name__}

calls = {"add": ((2, 3), {}), "boom": ((), {}), "when": ((), {}), "opaque": ((), {})}
out = {"conf_ignore_result": app.conf.task_ignore_result}
for side in ("routed", "stock"):
    answers = {}
    for name, (args, kwargs) in calls.items():
        answers[name] = read(app.tasks[f"rproj.{side}.{name}"].apply_async(args, kwargs))
    me = app.tasks[f"rproj.{side}.whoami"].delay()
    answers["whoami"] = {"id": me.id, "seen": me.get(timeout=60)}
    answers["sent"] = read(app.send_task(f"rproj.{side}.add", (20, 22)))
    out[side] = answers

same = f"same-{uuid.uuid4().hex}"
first = app.tasks["rproj.routed.add"].apply_async((1, 1), task_id=same)
second = app.tasks["rproj.routed.add"].apply_async((5, 5), task_id=same)
out["same"] = {"ids": [first.id, second.id], "values": [first.get(timeout=60), second.get()]}
print(json.dumps(out))
"""


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_a_routed_call_answers_as_stock_celery_through_the_result_backend(stack: Stack) -> None:
    for name, text in (("rproj", APP), ("rproj_settings", SETTINGS), ("rproj_tasks", TASKS)):
        (stack.root / f"{name}.py").write_text(text)
    env = {k: v for k, v in stack.env.items() if k != "CELERY_CONFIG_MODULE"}
    env["RPROJ_QUEUE"] = stack.queue
    worker = Proc("worker", [sys.executable, "-m", "celery", "-A", "rproj", "worker", "-c", "1",
                             "-Q", stack.queue,
                             "-l", "INFO", "--without-mingle", "--without-gossip"],
                  cwd=stack.root, env=env)  # fmt: skip
    stack.procs.append(worker)
    stack.wait(lambda: "ready." in worker.log(), timeout=30, what="worker ready")

    done = subprocess.run([sys.executable, "-c", CLIENT], cwd=stack.root, env=env,
                          timeout=300, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    routed, stock = out["routed"], out["stock"]

    # Issue 38: install() leaves Celery's default, so results are stored at all.
    assert out["conf_ignore_result"] is False
    assert routed["add"] == stock["add"] == {
        "status": "SUCCESS", "ready": True, "ok": True, "value": "5", "raised": None,
        "type": "AsyncResult",
    }  # fmt: skip
    assert routed["sent"] == stock["sent"] and stock["sent"]["value"] == "42"
    # The task's own exception, propagated or returned, as Celery gives it.
    assert routed["boom"] == stock["boom"]
    assert stock["boom"]["status"] == "FAILURE" and stock["boom"]["raised"] == "KeyError"
    # JSON cannot hold a datetime, Celery's serializer can: the caller gets the value.
    assert routed["when"] == stock["when"] and stock["when"]["status"] == "SUCCESS"
    # Nor can Celery's hold an object: stock fails the task with EncodeError; so does the run.
    assert routed["opaque"] == stock["opaque"]
    assert stock["opaque"]["status"] == "FAILURE" and stock["opaque"]["raised"] == "EncodeError"
    for side in (routed, stock):
        assert side["whoami"]["seen"] == side["whoami"]["id"]
    # The same task_id twice is one run: the second call's arguments never run.
    assert out["same"]["ids"][0] == out["same"]["ids"][1]
    assert out["same"]["values"] == [2, 2]

    # The kernel's side: each routed call is an occurrence keyed by its task id, settled.
    kernel_when = stack.occurrences("task:rproj.routed.when")
    assert [o.status.value for o in kernel_when] == ["succeeded"]
    assert kernel_when[0].result["unstored_result"]["type"] == "datetime.datetime"
    [opaque] = stack.occurrences("task:rproj.routed.opaque")
    assert opaque.status.value == "dead_letter" and "EncodeError" in opaque.last_error["message"]
    assert len(stack.occurrences("task:rproj.routed.add")) == 3  # a call, send_task, one "same"
    [me] = stack.occurrences("task:rproj.routed.whoami")
    assert me.trigger_key == f"key:{routed['whoami']['id']}"
