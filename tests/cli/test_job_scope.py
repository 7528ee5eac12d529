"""What a job may see and run: the worker's own settings are never passed, and a deployment
narrows the kinds and callables jobs may use; both refused at apply, naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli.support import job, write

from celery_app.scope import Scope
from kernel import Kernel


def apply(cli: Any, tmp_path: Path, *specs: dict[str, Any]) -> Any:
    path = write(tmp_path / "jobs.json", json.dumps({"jobs": list(specs)}))
    return cli("jobs", "apply", str(path), "--json")


def shell(job_id: str, **payload: Any) -> dict[str, Any]:
    return {"id": job_id, "kind": "shell", "payload": {"argv": ["env"], **payload}}


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"env_allow": ["AWS_REGION", "KERNEL_DATABASE_URL"]}, "payload.env_allow[1]"),
        ({"env_allow": ["KERNEL_SECRETS_FILE"]}, "payload.env_allow[0]"),
        ({"env_allow": ["CELERY_BROKER_URL"]}, "payload.env_allow[0]"),
        ({"secrets": {"DB": "KERNEL_DATABASE_URL"}}, "payload.secrets.DB"),
    ],
)
def test_a_job_may_not_pass_on_the_workers_own_settings(
    cli: Any, kernel: Kernel, tmp_path: Path, payload: dict[str, Any], field: str
) -> None:
    refused = apply(cli, tmp_path, shell("leaky", **payload))

    assert refused.code == 1
    error = refused.json()["error"]
    assert error["code"] == "INVALID_ARGUMENT" and field in error["message"]
    assert kernel.list_jobs() == []


@pytest.mark.parametrize(
    ("setting", "patterns", "spec", "field"),
    [
        ("KERNEL_ALLOWED_KINDS", "callable,http", shell("cmd"), "jobs['cmd'].kind"),
        (
            "KERNEL_ALLOWED_CALLABLES",
            "myproj.jobs:*, os.path:ex*",
            job("join"),  # os.path:join
            "jobs['join'].payload.callable",
        ),
    ],
)
def test_the_deployment_scope_refuses_kinds_and_callables_at_apply(
    cli: Any,
    kernel: Kernel,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    setting: str,
    patterns: str,
    spec: dict[str, Any],
    field: str,
) -> None:
    monkeypatch.setenv(setting, patterns)
    allowed = job("exists", payload={"callable": "os.path:exists", "args": ["a"]})

    refused = apply(cli, tmp_path, allowed, spec)

    error = refused.json()["error"]
    assert refused.code == 1 and field in error["message"] and setting in error["message"]
    assert kernel.list_jobs() == []  # nothing of the file was applied
    assert apply(cli, tmp_path, allowed).code == 0


def test_doctor_lists_jobs_that_pass_secret_looking_variables(cli: Any, kernel: Kernel) -> None:
    kernel.define_job(shell("backup", env_allow=["AWS_REGION", "AWS_SECRET_ACCESS_KEY"]))
    kernel.define_job(shell("report", env_allow=["REPORT_REGION"]))

    checks = {c["name"]: c for c in cli("doctor", "--json").json()["checks"]}

    passed = checks["job env"]
    assert passed["status"] == "warn"
    assert "backup (AWS_SECRET_ACCESS_KEY)" in passed["detail"] and "report" not in passed["detail"]


@pytest.mark.parametrize(
    ("kind", "payload", "refused_at"),
    [
        ("watchdog", {"check": {"argv": ["probe"]}}, "payload.check"),  # a command: shell
        ("watchdog", {"check": {"callable": "os.path:join"}}, "payload.check.callable"),
        ("watchdog", {"check": {"callable": "myproj.checks:disk"}}, None),
        ("callable", {"callable": "myproj.jobs:nightly"}, None),
        ("task", {"task": "myproj.tasks.add"}, "kind"),
    ],
)
def test_a_watchdogs_check_is_scoped_as_what_it_runs(
    kind: str, payload: dict[str, Any], refused_at: str | None
) -> None:
    scope = Scope(kinds=("callable", "watch*"), callables=("myproj.*",))
    refused = scope.refusal(kind, payload)
    assert (refused and refused[0]) == refused_at
