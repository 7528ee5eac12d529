"""Watchdog jobs with real processes: Beat fires them, a real worker runs their checks.

A failing check raises the alert everywhere it is promised (the ``watchdog_alert``
event, the exporter's counter and gauge, a ``kernel status`` warning, a POST to the
alert target); a passing one raises none and, self-destructing, disables its job;
a watch that is over alerts and disables its job too.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from integration.stack import Stack
from servers import serving

from celery_app.cli.exporter import KernelCollector

_FAIL = [sys.executable, "-c", "import sys; print('disk 99% full'); sys.exit(3)"]


class _Alerts(BaseHTTPRequestHandler):
    received: list[dict[str, Any]]

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        self.received.append(json.loads(self.rfile.read(length)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep the test's output to the test


@pytest.fixture
def alert_url() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A loopback HTTP server recording the alerts POSTed to it."""
    received: list[dict[str, Any]] = []
    handler = type("Alerts", (_Alerts,), {"received": received})
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), handler)) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}/alerts", received


def _watchdog(stack: Stack, job_id: str, schedule: dict[str, Any], **payload: Any) -> dict:
    return {"id": job_id, "kind": "watchdog", "queue": stack.queue, "schedule": schedule,
            "timeout": 30, "payload": payload}  # fmt: skip


def _metrics(stack: Stack) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    collector = KernelCollector(stack.kernel, beat_retention_s=60)
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in collector.collect()
        for s in family.samples
    }


def test_failing_checks_alert_and_passing_ones_self_destruct(
    stack: Stack, alert_url: tuple[str, list[dict[str, Any]]]
) -> None:
    url, posted = alert_url
    stack.use_jobs(
        _watchdog(
            stack,
            "disk",
            {"every": "1s"},
            check={"argv": _FAIL},
            target="db host disk",
            alert={"channel": "http", "target": url},
        ),
        _watchdog(stack, "healthy", {"every": "1s"}, check={"argv": ["true"]}),
        _watchdog(
            stack,
            "expired",
            {"every": "1s"},
            check={"callable": "json:loads", "args": ["not json"]},
            watch_for="1m",
            started_at="2020-01-01T00:00:00Z",
        ),
    )
    stack.start_worker("worker")
    stack.start_beat("beat")

    def alerts() -> list[Any]:
        return [e for e in stack.kernel.events(limit=1000) if e.type == "watchdog_alert"]

    stack.wait(
        lambda: {e.job_id for e in alerts()} >= {"disk", "expired"} or None,
        timeout=60,
        what="alerts from disk and expired",
    )
    stack.wait(
        lambda: not stack.kernel.get_job("healthy").enabled or None,
        timeout=60,
        what="healthy disabled by its passing check",
    )
    disk = next(e for e in alerts() if e.job_id == "disk")
    assert disk.data["reason"] == "exit" and disk.data["exit_code"] == 3
    assert "disk 99% full" in disk.data["output_tail"]
    assert disk.data["target"] == "db host disk" and disk.data["watch_over"] is False
    assert disk.data["check"].endswith("sys.exit(3)")
    expired = next(e for e in alerts() if e.job_id == "expired")
    assert expired.data["reason"] == "exception" and expired.data["watch_over"] is True
    assert "JSONDecodeError" in expired.data["message"]
    assert "healthy" not in {e.job_id for e in alerts()}
    assert stack.kernel.get_job("disk").enabled  # failing: it keeps watching
    assert not stack.kernel.get_job("expired").enabled  # its watch is over
    destructed = {
        e.job_id: e.data.get("reason")
        for e in stack.kernel.events(limit=1000)
        if e.type == "job_disabled"
    }
    assert destructed == {"healthy": "watchdog_check_passed", "expired": "watchdog_watch_over"}

    stack.wait(lambda: posted or None, timeout=30, what="the alert POSTed to its target")
    assert posted[0]["job_id"] == "disk" and posted[0]["exit_code"] == 3
    status = stack.cli("status")
    failing = {f["job_id"] for f in status["watchdog"]["failing_watchdogs"]}
    assert failing == {"disk", "expired"}
    assert any(w.startswith("watchdog disk is failing (exit code 3") for w in status["warnings"])
    assert not any("healthy" in w for w in status["warnings"])
    metrics = _metrics(stack)
    assert metrics[("celery_kernel_failing_watchdogs", ())] == 2
    assert metrics[("celery_kernel_watchdog_alerts_total", (("job", "disk"),))] >= 1
    assert ("celery_kernel_watchdog_alerts_total", (("job", "healthy"),)) not in metrics
    (healthy_run, *_) = stack.occurrences("healthy")
    assert healthy_run.result["watchdog"]["passed"] is True
