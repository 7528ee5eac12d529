"""A routed call is seen as its task by Celery's signals, events and worker state (issue 40).

One own app (``ident_app.py``) runs twice on real worker processes, Redis and a real event
receiver: as stock Celery, then with ``install(app)`` and ``ident.add`` routed through the
kernel. The same call, ``add.apply_async((1, 2), task_id=T)``, must show T to what a team
hooks on: ``before_task_publish``/``after_task_publish`` at the call, ``task_received`` in
the worker, the worker's ``successful_requests``, and the ``task-sent``, ``task-received``,
``task-started`` and ``task-succeeded`` events Flower builds its task list from.

What stays different is said by the test: the message published is the kernel's hint,
``kernel.run_occurrence``, under Celery's own ``shadow`` (the task's name), so the publish
signals' ``sender`` and ``task-sent``'s ``name`` are the hint's; a run's arguments are
stored as JSON, so monitors show ``[1, 2]`` where the caller passed ``(1, 2)``.
"""

from __future__ import annotations

import ast
import json
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from integration.stack import Proc, Stack

pytestmark = pytest.mark.long

#: Makes one call under the task id given and waits for its result.
CALL = """\
import sys
import ident_app
assert ident_app.add.apply_async((1, 2), task_id=sys.argv[1]).get(timeout=60) == 3
"""

#: Makes one call held back 4 s, revokes it at once and prints its state once it is ready.
REVOKE = """\
import sys, time
import ident_app
result = ident_app.add.apply_async((1, 2), task_id=sys.argv[1], countdown=4)
result.revoke()
deadline = time.monotonic() + 60
while not result.ready() and time.monotonic() < deadline:
    time.sleep(0.2)
print(result.state)
"""

#: ``argv[1]``: ``call`` the slow task under the id ``argv[2]``, ``terminate`` it (a revoke
#: with ``terminate=True``), or print its ``state`` once it is ready.
TERMINATE = """\
import sys, time
import ident_app
result = ident_app.app.AsyncResult(sys.argv[2])
if sys.argv[1] == "call":
    ident_app.slow.apply_async(task_id=sys.argv[2])
elif sys.argv[1] == "terminate":
    result.revoke(terminate=True)
else:
    deadline = time.monotonic() + 90
    while not result.ready() and time.monotonic() < deadline:
        time.sleep(0.2)
    print(result.state)
"""

#: ``call`` the failing task under the id ``argv[2]`` and wait for its end, or print the
#: exception its result holds.
BOOM = """\
import sys
import ident_app
result = ident_app.app.AsyncResult(sys.argv[2])
if sys.argv[1] == "call":
    ident_app.boom.apply_async(task_id=sys.argv[2]).get(timeout=60, propagate=False)
else:
    print(repr(result.result))
"""

#: A real event receiver, as Flower's: every event to a JSON line.
RECEIVE = """\
import json, sys
from ident_app import app

def record(event):
    with open(sys.argv[1], "a") as out:
        out.write(json.dumps(event, default=repr) + "\\n")

with app.connection_for_read() as conn:
    print("receiving", flush=True)
    app.events.Receiver(conn, handlers={"*": record}).capture(limit=None)
"""


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def _side_env(stack: Stack, name: str) -> dict[str, str]:
    """The environment of one side: its own queue and ledger; the kernel's routes the task."""
    env = {k: v for k, v in stack.env.items() if k != "CELERY_CONFIG_MODULE"}
    env.update(IDENT_QUEUE=f"ident-{uuid.uuid4().hex[:10]}",
               IDENT_LEDGER=str(stack.root / f"{name}.jsonl"),
               IDENT_BROKER=env["CELERY_BROKER_URL"])  # fmt: skip
    if name == "kernel":
        env.update(IDENT_KERNEL="1", KERNEL_DATABASE_URL=stack.database_url)
    return env


def _start(stack: Stack, name: str, env: dict[str, str], argv: list[str]) -> Proc:
    proc = Proc(name, [sys.executable, *argv], cwd=stack.root, env=env)
    stack.procs.append(proc)
    return proc


def _start_worker(stack: Stack, side: str, env: dict[str, str]) -> Proc:
    """One prefork process, task events on (``-E``), as a team would run it under Flower."""
    worker = _start(stack, f"{side}-worker", env,
                    ["-m", "celery", "-A", "ident_app", "worker", "-E", "-P", "prefork", "-c",
                     "1", "-Q", env["IDENT_QUEUE"], "-n", f"{side}@%h", "-l", "INFO",
                     "--without-mingle", "--without-gossip"])  # fmt: skip
    stack.wait(lambda: worker.logged("ready."), timeout=60, what=f"{side} worker ready")
    return worker


def _run_side(stack: Stack, name: str) -> dict[str, Any]:
    """One side's call; what the signals, the worker's state and the events showed of it."""
    root = stack.root
    env = _side_env(stack, name)
    ledger, events = Path(env["IDENT_LEDGER"]), root / f"{name}-events.jsonl"
    _start_worker(stack, name, env)
    receiver = _start(stack, f"{name}-events", env, ["-c", RECEIVE, str(events)])
    stack.wait(lambda: receiver.logged("receiving"), timeout=30, what=f"{name} receiver")
    # The receiver's queue is bound once it has seen an event: the worker's heartbeat.
    stack.wait(lambda: any(e["type"] == "worker-heartbeat" for e in _lines(events)),
               timeout=30, what=f"{name} events received")  # fmt: skip
    task_id = str(uuid.uuid4())
    subprocess.run([sys.executable, "-c", CALL, task_id], cwd=root, env=env, check=True,
                   timeout=120)  # fmt: skip

    # The run's end reaches the receiver after the caller's result: wait for it.
    stack.wait(lambda: any(e["type"] == "task-succeeded" for e in _lines(events)),
               timeout=30, what=f"{name}: a task-succeeded event")  # fmt: skip
    shown = {e["type"]: e for e in _lines(events) if e.get("uuid") == task_id}
    inspected = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "ident_app", "inspect", "ident_successful",
         "--json", "-d", f"{name}@{_host()}"],
        cwd=root, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert inspected.returncode == 0, inspected
    successful = next(iter(json.loads(inspected.stdout).values()))
    return {"id": task_id, "ledger": _lines(ledger), "events": shown, "successful": successful}


def _host() -> str:
    return socket.gethostname()


def _identity(side: dict[str, Any]) -> dict[str, Any]:
    """What the call's monitors saw of it, by its task id (arguments as values)."""
    task_id, ledger, events = side["id"], side["ledger"], side["events"]

    def signal(name: str) -> list[Any]:
        return [(x.get("sender"), x.get("name")) for x in ledger
                if x.get("signal") == name and x["id"] == task_id]  # fmt: skip

    def event(kind: str, *fields: str) -> tuple[Any, ...]:
        got = events.get(kind, {})
        return tuple(
            list(ast.literal_eval(got[f])) if f == "args" and f in got else got.get(f)
            for f in fields
        )

    return {
        "before_task_publish": signal("before_task_publish"),
        "after_task_publish": signal("after_task_publish"),
        "task_received": signal("task_received"),
        "successful_requests": task_id in side["successful"],
        "events": sorted(events),
        "received": event("task-received", "name", "args", "kwargs"),
        "sent": event("task-sent", "name", "args"),
        "result": event("task-succeeded", "result")[0],
    }


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_a_routed_call_is_seen_by_its_task_id_as_stock_celery_shows_it(stack: Stack) -> None:
    stock, kernel = (_identity(_run_side(stack, side)) for side in ("stock", "kernel"))
    assert stock == {
        "before_task_publish": [("ident.add", None)],
        "after_task_publish": [("ident.add", None)],
        "task_received": [(None, "ident.add")],
        "successful_requests": True,
        "events": ["task-received", "task-sent", "task-started", "task-succeeded"],
        "received": ("ident.add", [1, 2], "{}"),
        "sent": ("ident.add", [1, 2]),
        "result": "3",
    }
    # The hint, shadowed as the task, is what is published (the module docstring).
    published = [("kernel.run_occurrence", "ident.add")]
    assert kernel == {
        **stock,
        "before_task_publish": published,
        "after_task_publish": published,
        "sent": ("kernel.run_occurrence", [1, 2]),
    }


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_a_revoked_routed_call_never_runs_and_says_revoked_as_stock(stack: Stack) -> None:
    """``AsyncResult.revoke()`` of a call held back by its countdown: Celery marks it
    REVOKED and the worker discards its message when due. Routed, that message is the run's
    hint: the worker discards it, and the kernel cancels the run, so no later hint (Beat's
    pump) runs it and the kernel says so."""
    seen = {}
    for name in ("stock", "kernel"):
        env = _side_env(stack, name)
        worker = _start_worker(stack, name, env)
        task_id = str(uuid.uuid4())
        done = subprocess.run([sys.executable, "-c", REVOKE, task_id], cwd=stack.root, env=env,
                              capture_output=True, text=True, check=True, timeout=120)  # fmt: skip
        discarded = f"Discarding revoked task: ident.add[{task_id}]"
        stack.wait(lambda w=worker, line=discarded: w.logged(line),
                   timeout=30, what=f"{name}: the revoked message discarded when due")  # fmt: skip
        ran = [x for x in _lines(Path(env["IDENT_LEDGER"])) if x.get("ran") == task_id]
        seen[name] = (done.stdout.strip(), ran)
    assert seen == {"stock": ("REVOKED", []), "kernel": ("REVOKED", [])}

    def cancelled() -> Any:
        [run] = stack.kernel.list_occurrences(limit=10)
        return run if run.status.value == "cancelled" else None

    stack.wait(cancelled, timeout=30, what="the revoked call's run cancelled in the kernel")


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_a_routed_call_terminated_by_revoke_is_not_run_again(stack: Stack) -> None:
    """``revoke(terminate=True)`` of a running call: Celery kills the process and the task
    ends REVOKED, never run again. Routed, the worker cancels the run in the kernel before
    it signals the process, so the run's expired lease ends it cancelled (Beat's upkeep)
    instead of handing it to the next worker."""
    seen = {}
    for name in ("stock", "kernel"):
        env = _side_env(stack, name)
        _start_worker(stack, name, env)
        ledger, task_id = Path(env["IDENT_LEDGER"]), str(uuid.uuid4())

        def script(*args: str, env: dict[str, str] = env) -> str:
            done = subprocess.run([sys.executable, "-c", TERMINATE, *args], cwd=stack.root,
                                  env=env, capture_output=True, text=True, check=True,
                                  timeout=150)  # fmt: skip
            return done.stdout.strip()

        def started(ledger: Path = ledger, task_id: str = task_id) -> list[Any]:
            return [x for x in _lines(ledger) if x.get("started") == task_id]

        script("call", task_id)
        stack.wait(started, timeout=30, what=f"{name}: the slow call started")
        script("terminate", task_id)
        if name == "kernel":
            # Asked by the worker that got the revoke, before any lease expired: no Beat yet.
            stack.wait(lambda: stack.kernel.list_occurrences(limit=10)[0].cancel_requested,
                       timeout=30, what="the terminated run's cancel requested")  # fmt: skip
            beat = ["-m", "celery", "-A", "ident_app", "beat", "-s", str(stack.root / "beat")]
            _start(stack, "kernel-beat", env, beat)
            # Ended by its lease's expiry (Beat), cancelled: never claimed again after it.
            stack.wait(
                lambda: stack.kernel.list_occurrences(limit=10)[0].status.value == "cancelled",
                timeout=60, what="the terminated run cancelled in the kernel",
            )  # fmt: skip
        seen[name] = (script("state", task_id), len(started()))
    assert seen == {"stock": ("REVOKED", 1), "kernel": ("REVOKED", 1)}


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_a_failed_routed_call_keeps_its_own_exception_as_stock(stack: Stack) -> None:
    """The caller's result holds the task's exception, also once the hint that ran it has
    ended (the hint's own failure is never stored under the run's id, even with
    ``task_store_errors_even_if_ignored``)."""
    held = {}
    for name in ("stock", "kernel"):
        env = _side_env(stack, name)
        worker = _start_worker(stack, name, env)
        task_id = str(uuid.uuid4())
        run = [sys.executable, "-c", BOOM]
        subprocess.run([*run, "call", task_id], cwd=stack.root, env=env, check=True, timeout=120)
        # The message that ran it has ended: stock's task, the kernel's hint.
        stack.wait(lambda w=worker, t=task_id: w.logged(f"[{t}] raised"), timeout=30,
                   what=f"{name}: the message's end logged")  # fmt: skip
        shown = subprocess.run([*run, "show", task_id], cwd=stack.root, env=env, check=True,
                               capture_output=True, text=True, timeout=120)  # fmt: skip
        held[name] = shown.stdout.strip()
    assert held == {"stock": "ValueError('boom')", "kernel": "ValueError('boom')"}


#: Calls the task that retries once and waits for its result.
FLAKY = """\
import sys
import ident_app
assert ident_app.flaky.apply_async(task_id=sys.argv[1]).get(timeout=60) == "ok"
"""


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_a_retried_routed_call_shows_retry_to_monitors_as_stock(stack: Stack) -> None:
    """Between a retried call's attempts, the worker's events say ``task-retried`` (Flower:
    RETRY), as for Celery's retried task, not ``task-failed``; one task id throughout."""
    shown = {}
    for name in ("stock", "kernel"):
        env = _side_env(stack, name)
        _start_worker(stack, name, env)
        events = stack.root / f"{name}-events.jsonl"
        receiver = _start(stack, f"{name}-events", env, ["-c", RECEIVE, str(events)])
        stack.wait(lambda r=receiver: r.logged("receiving"), timeout=30, what="receiver")
        stack.wait(lambda e=events: any(x["type"] == "worker-heartbeat" for x in _lines(e)),
                   timeout=30, what=f"{name} events received")  # fmt: skip
        if name == "kernel":  # its pump hints the retry when it is due
            beat = ["-m", "celery", "-A", "ident_app", "beat", "-s", str(stack.root / "beat")]
            _start(stack, "kernel-beat", env, beat)
        task_id = str(uuid.uuid4())
        subprocess.run([sys.executable, "-c", FLAKY, task_id], cwd=stack.root, env=env,
                       check=True, timeout=120)  # fmt: skip

        def worker_events(e: Path = events, t: str = task_id) -> list[str] | None:
            kinds = [x["type"] for x in _lines(e)
                     if x.get("uuid") == t and x["type"] != "task-sent"]  # fmt: skip
            return kinds if "task-succeeded" in kinds else None

        # Sorted: a retry's next message may be received before the retry is announced.
        shown[name] = sorted(stack.wait(worker_events, timeout=30, what=f"{name}: events"))
    attempts = ["task-received", "task-received", "task-retried", "task-started", "task-started"]
    assert shown["stock"] == [*attempts, "task-succeeded"]
    assert shown["kernel"] == shown["stock"]
