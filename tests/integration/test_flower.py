"""A real Flower shows each run under its job's name, in a state that says how the run ended.

Beat publishes every hint with ``shadow=<job id>``, and Flower turns on the workers' task
events (off by default, as in Celery), so Flower's ``/api/tasks`` (built from those events
alone) names the job; a failed run
ends the Celery task in FAILURE. This module is also the job code of the failing job:
the worker imports it as ``test_flower`` from the stack's ``PYTHONPATH``, so its top
level imports nothing from the test tree.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

import pytest

from adapters.base import AdapterError, ExecutionContext

if TYPE_CHECKING:
    from integration.stack import Stack

#: A one-shot firing a second after Beat applies the job file.
SOON = {"in": "1s"}


def refuse(ctx: ExecutionContext) -> None:
    """Job code that fails in a way no retry can fix."""
    raise AdapterError("REFUSED", f"{ctx.occurrence.job_id} refuses to run", retryable=False)


def wait_for_release(ctx: ExecutionContext, path: str) -> None:
    """Job code that runs until the file ``path`` exists (at most a minute)."""
    deadline = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def get(url: str) -> str | None:
    """The body of ``url``, or None while the server is not answering yet."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            body: bytes = response.read()
            return body.decode()
    except (urllib.error.URLError, ConnectionError):
        return None


@pytest.fixture
def flower(stack: Stack) -> str:
    """Flower, started before the test's runs (:func:`start_flower`); its base URL."""
    return start_flower(stack)


def start_flower(stack: Stack) -> str:
    """Start ``celery flower`` on 127.0.0.1 with the stack's environment; its base URL.

    It runs as one of the stack's processes, so the stack stops it by PID and a
    failed test shows its log.
    """
    # Imported here: the worker imports this module for ``refuse``, without the test tree.
    from integration.stack import Proc

    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "celery_app",
        "flower",
        "--address=127.0.0.1",
        f"--port={port}",
    ]
    # Flower 2 answers /api/* without auth only when told to.
    env = {**stack.env, "FLOWER_UNAUTHENTICATED_API": "true"}
    stack.procs.append(Proc("flower", argv, cwd=stack.root, env=env))
    base = f"http://127.0.0.1:{port}"
    stack.wait(lambda: get(f"{base}/healthcheck") == "OK", timeout=30, what="flower listening")
    return base


def flower_tasks(base: str) -> dict[str, dict[str, Any]]:
    body = get(f"{base}/api/tasks")
    return json.loads(body) if body else {}


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_flower_shows_each_run_under_its_job_and_outcome(stack: Stack, flower: str) -> None:
    succeeding = stack.job("succeeds", "record", schedule=SOON)
    failing = {
        **stack.job("refuses", "record", schedule=SOON, max_attempts=3),
        "payload": {"callable": "test_flower:refuse"},
    }
    stack.use_jobs(succeeding, failing)
    worker = stack.start_worker("worker")
    # Flower learns of tasks only from events sent after it subscribed: see the worker's first.
    node = f"worker-{stack.queue}@"
    stack.wait(
        lambda: node in (get(f"{flower}/metrics") or ""),
        timeout=20,
        what="flower receiving the worker's events",
    )
    # Task events are off by default (Celery's default); Flower turns them on itself.
    stack.wait(
        lambda: worker.logged("Events of group {task} enabled by remote."),
        timeout=20,
        what="flower enabling the worker's task events",
    )
    stack.start_beat("beat")

    def runs_by_job() -> dict[str, dict[str, Any]] | None:
        ended = {
            task["name"]: task
            for task in flower_tasks(flower).values()
            if task["state"] in ("SUCCESS", "FAILURE")
        }
        return ended if {"succeeds", "refuses"} <= ended.keys() else None

    runs = stack.wait(runs_by_job, timeout=30, what="both jobs' runs in flower's /api/tasks")

    ok, bad = stack.occurrences("succeeds"), stack.occurrences("refuses")
    assert [o.status.value for o in ok] == ["succeeded"]
    assert [(o.status.value, (o.last_error or {}).get("code")) for o in bad] == [
        ("dead_letter", "REFUSED")
    ]
    assert (runs["succeeds"]["state"], runs["succeeds"]["args"]) == ("SUCCESS", f"[{ok[0].id}]")
    assert (runs["refuses"]["state"], runs["refuses"]["args"]) == ("FAILURE", f"[{bad[0].id}]")
    assert runs["refuses"]["exception"] == (
        f"OccurrenceFailed('job refuses: REFUSED, occurrence {bad[0].id} is dead_letter')"
    )
    # The task names the failure as expected (throws=): one line at INFO, no traceback.
    assert worker.logged("raised expected: OccurrenceFailed(")
    assert not worker.logged("Traceback")


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_a_run_in_flight_when_flower_starts_shows_its_jobs_name(stack: Stack) -> None:
    """Its task-received and task-started events went out before Flower (or with task
    events off): only its end reaches Flower, and that names the job too (not ``null``)."""
    release = stack.root / "release"
    stack.use_jobs({
        **stack.job("long-one", "record", schedule=SOON),
        "payload": {"callable": "test_flower:wait_for_release", "kwargs": {"path": str(release)}},
    })  # fmt: skip
    worker = stack.start_worker("worker")
    stack.start_beat("beat")
    [running] = stack.wait(
        lambda: [o for o in stack.occurrences("long-one") if o.status.value == "running"],
        timeout=30,
        what="the run under way",
    )
    flower = start_flower(stack)
    stack.wait(
        lambda: worker.logged("Events of group {task} enabled by remote."),
        timeout=20,
        what="flower enabling the worker's task events",
    )
    release.touch()

    def ended() -> list[dict[str, Any]] | None:
        done = [t for t in flower_tasks(flower).values() if t["state"] == "SUCCESS"]
        return done or None

    [task] = stack.wait(ended, timeout=30, what="the run's end in flower's /api/tasks")
    assert task["name"] == "long-one", task
    assert stack.occurrences("long-one")[0].id == running.id


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_flower_shows_each_run_of_a_batch_under_its_job(stack: Stack, flower: str) -> None:
    worker = stack.start_worker("worker")
    stack.define(
        stack.job("alpha", "record"),
        stack.job("beta", "record"),
        stack.job("slow", "record", kwargs={"sleep": 0.3}),
    )
    stack.wait(
        lambda: worker.logged("Events of group {task} enabled by remote."),
        timeout=20,
        what="flower enabling the worker's task events",
    )
    batch = [stack.run_now("alpha"), stack.run_now("beta"), stack.run_now("alpha")]
    stack.send_hints(*batch)  # one message, as the pump batches a deep queue
    # A batch of long runs sends its rest again, one id a message, without a job's name.
    long_batch = [stack.run_now("slow"), stack.run_now("slow"), stack.run_now("beta")]
    stack.send_hints(*long_batch)

    def runs() -> dict[str, str] | None:
        named = {
            task["args"]: task["name"]
            for task in flower_tasks(flower).values()
            if task["state"] == "SUCCESS" and task["name"] in ("alpha", "beta", "slow")
        }
        return named if len(named) == 6 else None

    named = stack.wait(runs, timeout=30, what="each run of the batches in flower's /api/tasks")
    assert named == {
        f"[{batch[0]}]": "alpha",
        f"[{batch[1]}]": "beta",
        f"[{batch[2]}]": "alpha",
        f"[{long_batch[0]}]": "slow",
        f"[{long_batch[1]}]": "slow",
        f"[{long_batch[2]}]": "beta",
    }
    assert all(stack.occurrence(i).status.value == "succeeded" for i in batch + long_batch)
    assert worker.logged("batch runs long: 1 occurrences sent again")
