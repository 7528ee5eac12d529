"""The ``watchdog`` kind's payload (validation, JSON Schema) and its adapter's verdicts.

The adapter runs real commands through the shell adapter's supervisor and real
functions; its alert target is a loopback port nobody listens on.
"""

from __future__ import annotations

import socket
import sys
import threading
from typing import Any

import jsonschema
import pytest
from unit.adapter_support import make_context

from adapters.base import Cancelled
from adapters.watchdog import WatchdogAdapter
from kernel.errors import InvalidArgument
from kernel.spec.jobfile import job_file_schema
from kernel.spec.jobspec import validate_job_spec


def _job(**payload: Any) -> dict[str, Any]:
    return {"id": "wd", "kind": "watchdog", "schedule": {"every": "1m"}, "payload": payload}


def test_a_minimal_watchdog_gets_the_seed_defaults() -> None:
    payload = validate_job_spec(_job(check={"argv": ["true"]})).to_dict()["payload"]
    assert payload["self_destruct"] is True
    assert payload["watch_for"] is None and payload["started_at"] is None
    assert payload["alert"] is None and payload["target"] is None
    assert payload["check"]["argv"] == ["true"] and payload["check"]["env"] == {}
    written = _job(
        check={"callable": "os:getcwd"},
        watch_for="1h30m",
        started_at="2026-12-01T12:00:00+01:00",
        alert={"channel": "task", "target": "alerts.page"},
    )
    payload = validate_job_spec(written).to_dict()["payload"]
    assert payload["watch_for"] == 5400.0 and payload["started_at"] == "2026-12-01T11:00:00Z"
    assert payload["check"] == {"callable": "os:getcwd", "args": [], "kwargs": {}}


def test_every_problem_is_named_by_its_field_path_at_once() -> None:
    bad = _job(
        check={"argv": [], "env": {"1X": "y"}},
        watch_for=30,
        self_destruct="yes",
        alert={"channel": "sms", "target": "x"},
        extra=1,
    )
    with pytest.raises(InvalidArgument) as refused:
        validate_job_spec(bad)
    fields = [e["field"] for e in refused.value.details["errors"]]
    assert fields == [
        "payload.extra",
        "payload.check.argv",
        "payload.check.env.1X",
        "payload.watch_for",
        "payload.self_destruct",
        "payload.alert.channel",
    ]
    assert refused.value.field == "payload.extra"
    for wrong, field, words in [
        ({}, "payload.check", "is required"),
        ({"check": ["true"]}, "payload.check", "argv (a command) or callable"),
        ({"check": {"callable": "os:getcwd", "argv": ["x"]}}, "payload.check.argv", "unknown"),
        (
            {"check": {"argv": ["true"]}, "alert": {"channel": "http", "target": "ftp://h/"}},
            "payload.alert.target",
            "http:// or https://",
        ),
    ]:
        with pytest.raises(InvalidArgument) as refused:
            validate_job_spec(_job(**wrong))
        assert refused.value.field == field and words in refused.value.message


def test_the_job_file_schema_describes_the_watchdog_payload() -> None:
    validator = jsonschema.Draft202012Validator(job_file_schema())
    good = _job(check={"argv": ["true"]}, watch_for="2h", alert={"channel": "task", "target": "t"})
    assert list(validator.iter_errors({"jobs": [good]})) == []
    for bad in (_job(), _job(check={"argv": ["true"]}, self_destruct=1)):
        assert list(validator.iter_errors({"jobs": [bad]})), bad


def _verdict(payload: dict[str, Any], **context: Any) -> dict[str, Any]:
    result = WatchdogAdapter().execute(make_context("watchdog", payload, **context))
    assert set(result) == {"watchdog"}
    verdict: dict[str, Any] = result["watchdog"]
    return verdict


def _script(code: str) -> dict[str, Any]:
    return {"argv": [sys.executable, "-c", code]}


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_command_check_passes_on_exit_zero_and_fails_otherwise() -> None:
    passed = _verdict({"check": _script("print('all fine')")})
    assert passed["passed"] is True and passed["reason"] is None and passed["exit_code"] == 0
    assert passed["delivered"] is None
    failed = _verdict({"check": _script("import sys; print('x' * 5000); sys.exit(4)")})
    assert failed["passed"] is False and failed["reason"] == "exit" and failed["exit_code"] == 4
    assert "exited with code 4" in failed["message"]
    assert failed["output_tail"].startswith("...") and len(failed["output_tail"]) == 1003
    slow = _verdict({"check": _script("import time; time.sleep(30)")}, timeout_s=0.5)
    assert slow["reason"] == "timeout" and slow["exit_code"] is None
    missing = _verdict({"check": {"argv": ["/nonexistent/check"]}})
    assert missing["reason"] == "error" and "cannot start" in missing["message"]


def test_a_function_check_fails_by_raising() -> None:
    assert _verdict({"check": {"callable": "os:getcwd"}})["passed"] is True
    failed = _verdict({"check": {"callable": "json:loads", "args": ["{"]}})
    assert failed["reason"] == "exception" and failed["message"].startswith("JSONDecodeError")


def test_a_cancelled_check_is_a_cancelled_run_not_a_verdict() -> None:
    cancelled = threading.Event()
    cancelled.set()
    with pytest.raises(Cancelled):
        _verdict({"check": {"argv": ["true"]}}, cancelled=cancelled)


def test_an_unreachable_alert_target_is_noted_and_does_not_fail_the_run() -> None:
    url = f"http://127.0.0.1:{_closed_port()}/alert"
    failing = {"check": {"argv": ["false"]}}
    by_http = _verdict({**failing, "alert": {"channel": "http", "target": url}})
    assert by_http["passed"] is False and by_http["delivered"] is False
    # No Celery app to send the task with: noted the same way.
    by_task = _verdict({**failing, "alert": {"channel": "task", "target": "alerts.page"}})
    assert by_task["delivered"] is False
    passing = _verdict({"check": {"argv": ["true"]}, "alert": {"channel": "http", "target": url}})
    assert passing["delivered"] is None  # nothing to send
