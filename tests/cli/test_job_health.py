"""Job health on the command line: ``doctor``'s timeout check, ``jobs list`` health fields."""

from __future__ import annotations

from datetime import timedelta

import pytest
from cli.support import define

from celery_app.cli.exporter import KernelCollector
from kernel import Kernel


def _timeouts(cli) -> dict[str, str]:
    return next(c for c in cli("doctor", "--json").json()["checks"] if c["name"] == "timeouts")


def test_doctor_lists_jobs_without_a_timeout(
    cli, kernel: Kernel, monkeypatch: pytest.MonkeyPatch
) -> None:
    define(kernel, "bounded", timeout="10m")
    define(kernel, "open-b")
    define(kernel, "open-a")
    check = _timeouts(cli)
    assert check["status"] == "warn"
    assert "jobs without a timeout may run forever: open-a, open-b;" in check["detail"]
    assert "KERNEL_DEFAULT_TIMEOUT" in check["detail"]

    monkeypatch.setenv("KERNEL_DEFAULT_TIMEOUT", "15m")
    check = _timeouts(cli)
    assert check["status"] == "ok"
    assert check["detail"] == (
        "jobs without a timeout run at most kernel_default_timeout (900s): open-a, open-b"
    )


@pytest.mark.parametrize("value", ["soon", "0", "-5m"])
def test_a_bad_default_timeout_is_refused_naming_its_variable(
    cli, kernel: Kernel, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("KERNEL_DEFAULT_TIMEOUT", value)
    result = cli("doctor", "--json")
    assert result.code == 1
    [settings] = result.json()["checks"]
    assert settings["status"] == "fail"
    assert settings["detail"].startswith(f"KERNEL_DEFAULT_TIMEOUT={value!r}: expected a duration")


def _dead_letter(kernel: Kernel, job_id: str, request_id: str) -> int:
    occ = kernel.run_now(job_id, request_id=request_id, operator="t", force=True).occurrence.id
    kernel.claim(occ, owner="w", lease=60)
    kernel.fail(occ, owner="w", fence=1, code="X", message="x", retryable=False)
    return occ


def test_jobs_list_and_show_carry_each_jobs_health(cli, kernel: Kernel) -> None:
    define(kernel, "failing")
    define(kernel, "quiet", enabled=False)
    ok = kernel.run_now("failing", request_id="ok", operator="t", force=True).occurrence.id
    kernel.claim(ok, owner="w", lease=60)
    kernel.succeed(ok, owner="w", fence=1)
    dead = [_dead_letter(kernel, "failing", f"r{n}") for n in range(3)]

    listed = {j["id"]: j["health"] for j in cli("jobs", "list", "--json").json()}
    failing = listed["failing"]
    assert failing["consecutive_failures"] == 3
    assert failing["last_success_at"] == kernel.get_occurrence(ok).to_dict()["settled_at"]
    assert failing["last_failure_at"] == kernel.get_occurrence(dead[-1]).to_dict()["settled_at"]
    assert listed["quiet"] == {
        "last_success_at": None,
        "last_failure_at": None,
        "consecutive_failures": 0,
        "next_fire_at": None,
    }
    shown = cli("jobs", "show", "failing", "--json").json()
    assert shown["health"] == failing
    table = cli("jobs", "list").out
    assert "LAST SUCCESS" in table and "FAILS" in table
    assert "fails in row  3" in cli("jobs", "show", "failing").out


def test_the_exporter_has_job_health_gauges(kernel: Kernel) -> None:
    define(kernel, "failing", schedule={"every": "1h"})
    define(kernel, "new")
    _dead_letter(kernel, "failing", "r1")
    _dead_letter(kernel, "failing", "r2")
    samples = {
        (s.name, s.labels["job"]): s.value
        for family in KernelCollector(kernel, beat_retention_s=600).collect()
        for s in family.samples
        if "job" in s.labels and s.name.startswith("celery_kernel_job_")
    }
    # No Beat placed the cursors yet, so neither job has a next firing (nor a sample).
    failed_at = kernel.job_health("failing")["failing"].last_failure_at
    assert failed_at is not None
    assert samples == {
        ("celery_kernel_job_consecutive_failures", "failing"): 2,
        ("celery_kernel_job_consecutive_failures", "new"): 0,
        ("celery_kernel_job_last_failure_timestamp_seconds", "failing"): failed_at.timestamp(),
    }


def test_why_names_a_firing_whose_run_the_history_limit_deleted(cli, kernel: Kernel) -> None:
    define(
        kernel, "limited", schedule={"cron": "* * * * *"}, overlap="allow", history={"succeeded": 1}
    )
    minute = kernel.now().replace(second=0, microsecond=0)
    firings = [minute - timedelta(minutes=n) for n in (3, 2)]
    keys = [f"cron:{at.isoformat().replace('+00:00', 'Z')}" for at in firings]
    kernel.fire(
        "limited",
        expected_revision=1,
        expected_cursor=None,
        firings=list(zip(keys, firings, strict=True)),
        next_cursor=(f"cron:{minute.isoformat().replace('+00:00', 'Z')}", minute),
    )
    for occ in sorted(kernel.list_occurrences(job_id="limited"), key=lambda o: o.id):
        kernel.claim(occ.id, owner="w", lease=60)
        kernel.succeed(occ.id, owner="w", fence=1)
    assert kernel.apply_retention({"succeeded": None})["occurrences"] == 1

    gone = cli("why", "limited", "--at", firings[0].isoformat(), "--json").json()
    assert gone["outcome"] == "pruned"
    assert (
        "by the job's history limit (history.succeeded: only the newest 1 succeeded"
        in (gone["reason"])
    )
    kept = cli("why", "limited", "--at", firings[1].isoformat(), "--json").json()
    assert kept["outcome"] == "created"
