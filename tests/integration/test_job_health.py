"""Job health with real workers: the deployment's default timeout and failure notifications."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from integration.stack import SETTINGS_MODULE, Stack


class _Endpoint:
    """An http endpoint on 127.0.0.1 that answers 500 to its first ``failures`` requests."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.requests: list[tuple[int, dict[str, str], dict[str, Any]]] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status = 500 if len(endpoint.requests) < endpoint.failures else 200
                endpoint.requests.append((status, dict(self.headers), body))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def endpoint() -> Iterator[_Endpoint]:
    made = _Endpoint(failures=1)
    yield made
    made.server.shutdown()
    made.server.server_close()


def _hooked(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_worker_bounds_runs_by_default_and_notifies_failed_runs_once(
    stack: Stack, endpoint: _Endpoint
) -> None:
    # One worker for both items: a worker's start is most of such a test's time.
    hooked = stack.root / "hooked.jsonl"
    stack.env["KERNEL_DEFAULT_TIMEOUT"] = "1s"
    stack.env["HEALTH_HOOK_LEDGER"] = str(hooked)
    with (stack.root / f"{SETTINGS_MODULE}.py").open("a") as settings:
        settings.write('imports = ("health_jobs",)\n')
    worker = stack.start_worker("worker", concurrency=2)
    boom = {"callable": "health_jobs:boom", "kwargs": {"ledger": str(stack.ledger_path)}}
    notify_task = {"on": ["dead_letter"], "task": "health.hook"}
    notify_http = {"on": ["failed"], "http": endpoint.url, "backoff": "1s", "attempts": 3}
    stack.define(
        # 100 steps of 0.2 s with a checkpoint after each: only the default timeout ends it.
        stack.job("endless", "steps", kwargs={"total": 100, "step_s": 0.2}, max_attempts=1),
        stack.job("bounded", "steps", kwargs={"total": 8, "step_s": 0.2}, timeout="5s"),
        {
            **stack.job("to-task", "record"),
            "payload": boom,
            "max_attempts": 1,
            "notify": notify_task,
        },
        {
            **stack.job("to-http", "record"),
            "payload": boom,
            "max_attempts": 1,
            "notify": notify_http,
        },
    )
    endless, bounded = stack.run_now("endless"), stack.run_now("bounded")
    to_task, to_http = stack.run_now("to-task"), stack.run_now("to-http")
    # A duplicate hint of to-task: claimed once, so notified once.
    _send(stack, [(RUN, endless), (RUN, bounded), (RUN, to_task), (RUN, to_task), (RUN, to_http)])

    settled = lambda: all(stack.settled(j) for j in ("endless", "bounded"))  # noqa: E731
    stack.wait(settled, timeout=30, what="the timed runs to settle")
    timed_out = stack.occurrence(endless)
    assert timed_out.status.value == "dead_letter"
    assert timed_out.last_error is not None
    assert timed_out.last_error["code"] == "TIMEOUT"
    assert "timed out after 1s (kernel_default_timeout)" in timed_out.last_error["message"]
    assert len(stack.ledger(occurrence_id=endless)) < 10
    # A job's own timeout wins over the default: 1.6 s of steps outlive the default's 1 s.
    assert stack.occurrence(bounded).status.value == "succeeded"

    [told] = stack.wait(lambda: _hooked(hooked), timeout=30, what="the hook task")
    assert (told["event"], told["occurrence_id"], told["status"]) == (
        "dead_letter",
        to_task,
        "dead_letter",
    )
    assert "boom in occurrence" in told["error"]["message"]
    delivered = lambda: [r for r in endpoint.requests if r[0] == 200]  # noqa: E731
    [(_, headers, body)] = stack.wait(delivered, timeout=30, what="the endpoint's 2nd try")
    assert [status for status, _, _ in endpoint.requests] == [500, 200]
    assert body["event"] == "failed" and body["occurrence_id"] == to_http
    assert headers["X-Kernel-Notification"] == str(body["notification_id"])
    assert headers["Idempotency-Key"] == str(to_http)
    stack.wait(
        lambda: stack.kernel.notification(body["notification_id"]).state == "delivered",
        timeout=10,
        what="the http notification recorded delivered",
    )

    # Hinted again (a lost ack, a second worker): found taken, nothing delivered twice.
    with stack.kernel.engine.connect() as conn:
        ids = [r[0] for r in conn.exec_driver_sql("SELECT id FROM notifications ORDER BY id")]
    assert len(ids) == 2
    _send(stack, [(RUN, to_task), *((NOTIFY, n) for n in ids)])
    stack.wait(
        lambda: worker.log().count("'not_claimable'") >= 4,
        timeout=20,
        what="the repeated hints dropped",
    )
    types = [e.type for e in stack.kernel.events(occurrence_id=to_http, limit=100)]
    assert types.count("notification_failed") == 1
    assert types.count("notification_delivered") == 1
    assert len(_hooked(hooked)) == 1
    assert len(endpoint.requests) == 2


RUN, NOTIFY = "kernel.run_occurrence", "kernel.notify"


def _send(stack: Stack, messages: list[tuple[str, int]]) -> None:
    """Publish ``(task name, id)`` messages to the stack's queue, from one process."""
    code = (
        "import json, sys\nfrom celery_app import app\n"
        "with app.producer_or_acquire() as producer:\n"
        "    for name, ident in json.loads(sys.argv[2]):\n"
        "        app.send_task(name, args=[ident], queue=sys.argv[1], producer=producer)\n"
    )
    subprocess.run(
        [sys.executable, "-c", code, stack.queue, json.dumps(messages)],
        cwd=stack.root,
        env=stack.env,
        check=True,
        timeout=60,
        capture_output=True,
    )
