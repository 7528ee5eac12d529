"""Approval and budget gates on the command line: approve, reject, budgets, status, why,
job files' ``budgets:`` and the exporter's gate metrics."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cli.support import define, job, write
from prometheus_client.core import Metric

from beat_schedule.timing import trigger_key
from celery_app.cli.exporter import KernelCollector
from kernel import Kernel

APPROVAL = {"required": True, "timeout": "1h"}


def _fire(kernel: Kernel, job_id: str, n: int = 1) -> list[int]:
    """Materialise ``n`` firings as Beat does; the ids of every occurrence made."""
    current = kernel.get_job(job_id)
    now = kernel.now()
    keys = [(f"test:{job_id}:{now.isoformat()}:{i}", now) for i in range(n)]
    report = kernel.fire(
        job_id,
        expected_revision=current.revision,
        expected_cursor=None,
        firings=keys,
        next_cursor=None,
    )
    assert not report.stale
    return sorted(o.id for o in kernel.list_occurrences(job_id=job_id, limit=1000))


def test_approve_and_reject_with_request_ids(cli, kernel: Kernel) -> None:
    define(kernel, "gated", approval=APPROVAL)
    first, second = _fire(kernel, "gated", 2)
    listed = cli("occurrences", "list", "--status", "awaiting_approval", "--json").json()
    assert sorted(o["id"] for o in listed) == [first, second]
    assert all(o["approval_due_at"] for o in listed)
    status = cli("status", "--json").json()
    assert status["counts"]["awaiting_approval"] == 2
    assert "awaiting approval" in cli("status").out

    ok = cli("approve", str(first), "--request-id", "a1", "--operator", "ann", "--json")
    assert ok.code == 0, ok.out
    data = ok.json()
    assert (data["request_id"], data["deduplicated"], data["occurrence"]["status"]) == (
        "a1",
        False,
        "queued",
    )
    assert cli("approve", str(first), "--request-id", "a1", "--json").json()["deduplicated"]

    no = cli("reject", str(second), "--reason", "not tonight", "--operator", "bob")
    assert no.code == 0, no.err
    assert "skipped" in no.out
    (rejected,) = [
        e for e in kernel.events(occurrence_id=second) if e.type == "occurrence_rejected"
    ]
    assert rejected.data["reason"] == "not tonight" and rejected.data["operator"] == "bob"

    again = cli("approve", str(second), "--json")
    assert again.code == 1
    assert again.json()["error"]["code"] == "STATE_CONFLICT"
    assert "not awaiting_approval" in again.json()["error"]["message"]
    assert cli("reject", "999999").err.startswith("Error NOT_FOUND:")


def test_a_job_file_defines_shared_budgets_its_jobs_name(
    cli, kernel: Kernel, tmp_path: Path
) -> None:
    document = {
        "budgets": {"nightly": {"window": "1d", "max_runs": 1}},
        "jobs": [job("a", budget="nightly"), job("b", budget="nightly")],
    }
    applied = cli(
        "jobs", "apply", str(write(tmp_path / "jobs.json", json.dumps(document))), "--json"
    )
    assert applied.code == 0, applied.out
    assert applied.json()["budgets"] == ["nightly"]
    assert [o.status for o in [*map(kernel.get_occurrence, _fire(kernel, "a"))]] == ["queued"]
    (skipped,) = [kernel.get_occurrence(i) for i in _fire(kernel, "b")]
    assert skipped.skip_reason == "budget"
    (nightly,) = cli("budgets", "list", "--json").json()["budgets"]
    assert nightly["name"] == "nightly" and nightly["shared"] and nightly["runs"] == 1
    assert "nightly" in cli("budgets", "list").out


def test_invalid_budgets_are_all_reported_and_nothing_is_applied(
    cli, kernel: Kernel, tmp_path: Path
) -> None:
    document = {
        "budgets": {"x": {"window": "1h"}, "y": {"max_runs": 0}},
        "jobs": [job("a", budget="undefined-here"), job("b", budget={"max_units": -1})],
    }
    result = cli(
        "jobs", "apply", str(write(tmp_path / "jobs.json", json.dumps(document))), "--json"
    )
    assert result.code == 1
    error = result.json()["error"]
    fields = [e["field"] for e in error["details"]["errors"]]
    assert fields == ["budgets.x", "budgets.y.max_runs", "jobs[1].budget.max_units"]
    assert kernel.list_jobs() == [] and kernel.list_budgets() == []
    named = {"jobs": [job("a", budget="undefined-here")]}
    refused = cli("jobs", "apply", str(write(tmp_path / "one.json", json.dumps(named))), "--json")
    assert refused.json()["error"]["details"]["field"] == "budget"
    assert kernel.list_jobs() == []


def test_why_explains_a_budget_skip_and_an_awaiting_approval(cli, kernel: Kernel) -> None:
    t = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    minute = timedelta(minutes=1)
    define(
        kernel,
        "capped",
        schedule={"every": "60s"},
        overlap="allow",
        budget={"window": "1d", "max_runs": 1},
    )
    define(kernel, "gated", schedule={"every": "60s"}, approval=APPROVAL)
    for job_id, n in (("capped", 2), ("gated", 1)):
        kernel.fire(
            job_id,
            expected_revision=1,
            expected_cursor=None,
            firings=[(trigger_key("every", t + minute * i), t + minute * i) for i in range(n)],
            next_cursor=(trigger_key("every", t + minute * n), t + minute * n),
        )
    capped = cli("why", "capped", "--at", (t + minute).isoformat(), "--json").json()
    assert capped["outcome"] == "skipped"
    assert capped["reason"].startswith("recorded as skipped: budget (its budget (job:capped)")
    gated = cli("why", "gated", "--at", t.isoformat(), "--json").json()
    assert gated["outcome"] == "created"
    assert "awaits approval (kernel approve|reject" in gated["reason"]
    assert "rejectd" not in gated["reason"] and "it is rejected automatically" in gated["reason"]


def _samples(collector: KernelCollector) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    families: list[Metric] = list(collector.collect())
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def test_the_exporter_counts_approvals_and_budget_skips(kernel: Kernel) -> None:
    define(kernel, "gated", approval=APPROVAL, budget={"window": "1d", "max_runs": 2})
    first, second, third = _fire(kernel, "gated", 3)
    kernel.approve(first, request_id="a", operator="t")
    kernel.reject(second, request_id="r", operator="t", reason="free text, not a label")
    samples = _samples(KernelCollector(kernel, beat_retention_s=600))
    assert (
        samples[("celery_kernel_approvals_total", (("auto", "false"), ("decision", "approved")))]
        == 1
    )
    assert (
        samples[("celery_kernel_approvals_total", (("auto", "false"), ("decision", "rejected")))]
        == 1
    )
    assert samples[("celery_kernel_skips_total", (("reason", "budget"),))] == 1
    assert samples[("celery_kernel_skips_total", (("reason", "approval_rejected"),))] == 1
    assert samples[("celery_kernel_budget_runs", (("budget", "job:gated"),))] == 1
    assert samples[("celery_kernel_occurrences", (("status", "awaiting_approval"),))] == 0
    assert kernel.get_occurrence(third).skip_reason == "budget"
