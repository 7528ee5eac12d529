"""``kernel doctor``: every check of a deployment's health, then every setting and its origin."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

import click

from adapters import load_adapters
from adapters.shell import CONTAINMENT_ENV
from adapters.supervisor import SUBREAPER, containment
from beat_schedule.sync import read_beat_schedule
from celery_app import operations
from celery_app.cli.output import Env, command, table
from celery_app.cli.secret_files import open_secret_files
from celery_app.cli.settings_report import settings_checks, settings_listing
from celery_app.config import open_kernel
from celery_app.operations import beat_health, beat_warning
from celery_app.settings import KernelSettings
from kernel import MAX_LOST_LEASES, Job, Kernel, KernelError, is_sensitive_name, masked_url

__all__ = ["doctor"]


def _check(name: str, status: str, detail: str) -> dict[str, str]:
    return {"name": name, "status": status, "detail": detail}


def _beat_schedule_checks(app: Any, kernel: Kernel | None) -> list[dict[str, str]]:
    """One ``beat_schedule`` check per refused entry (fail), per entry that differs from
    its job (warn) and per warning (warn)."""
    schedule = read_beat_schedule(app.conf, app.tasks, app=app)
    findings = operations.schedule_findings(app, kernel)
    checks = [_check("schedule", "fail", r["reason"]) for r in findings["refused"]]
    checks += [_check("schedule", "warn", c["detail"]) for c in findings["changed"]]
    checks += [_check("schedule", "warn", w) for e in schedule.entries for w in e.warnings]
    if not checks:
        checks.append(_check("schedule", "ok", f"{len(schedule.entries)} entries"))
    return checks


def _containment_check() -> dict[str, str]:
    """How this host contains shell runs (adapters.supervisor): what a worker started here
    with this environment uses."""
    forced = os.environ.get(CONTAINMENT_ENV, "auto")
    mode, why = containment(forced)
    if forced not in ("auto", SUBREAPER):
        return _check(
            "shell", "warn", f"{CONTAINMENT_ENV}={forced!r} is not auto or subreaper: {why}"
        )
    return _check("shell", "ok", f"runs contained by {mode}: {why}")


def _doctor_checks(app: Any) -> list[dict[str, str]]:
    try:
        settings = KernelSettings.from_app(app)
    except KernelError as exc:
        return [_check("settings", "fail", exc.message)]
    checks = [_check("settings", "ok", f"database {masked_url(settings.database_url)}")]
    checks += settings_checks(app, settings)
    try:
        jobs_file = settings.require_jobs_file()
    except KernelError as exc:
        checks.append(_check("jobs file", "fail", exc.message))
    else:
        checks.append(_check("jobs file", "ok", jobs_file or "none (KERNEL_JOBS_FILE unset)"))
    if settings.sqlite_synchronous == "NORMAL" and settings.database_url.startswith("sqlite"):
        checks.append(
            _check(
                "durability",
                "warn",
                "SQLite synchronous=NORMAL: a power loss may lose committed claims and settles",
            )
        )
    try:
        adapters = load_adapters(app)
    except Exception as exc:  # a broken plug-in must show up here, not as a traceback
        checks.append(_check("adapters", "fail", f"{type(exc).__name__}: {exc}"))
        adapters = {}
    else:
        checks.append(_check("adapters", "ok", ", ".join(sorted(adapters)) or "none"))
    checks.append(_containment_check())
    try:
        kernel = open_kernel(app, migrate=False)
    except KernelError as exc:
        checks += _beat_schedule_checks(app, None)
        return [*checks, _check("database", "fail", f"{exc.code}: {exc.message}")]
    try:
        checks += _beat_schedule_checks(app, kernel)
        checks.append(_check("database", "ok", "reachable, schema up to date"))
        checks += [_check(f.name, f.status, f.detail) for f in kernel.checkup()]
        checks.append(_secret_files_check(app))
        missing = sorted(job.id for job in kernel.list_jobs() if job.kind not in adapters)
        checks.append(
            _check("job kinds", "fail", f"no adapter installed for jobs {missing}")
            if missing
            else _check("job kinds", "ok", "every job's kind has an adapter")
        )
        checks.append(_passed_secrets_check(kernel.list_jobs()))
        checks.append(_timeout_check(kernel.list_jobs(), settings.default_timeout))
        checks.append(_attempts_check(kernel.list_jobs()))
        status = kernel.status()
        now = datetime.fromtimestamp(status["now_ms"] / 1000, UTC)
        retention = settings.beat_retention
        warning = beat_warning(beat_health(kernel.beats(), now, retention), retention, app)
        checks.append(
            _check("beat", "warn", warning) if warning else _check("beat", "ok", "ticking")
        )
        stuck = status["counts"]["dead_letter"] + status["counts"]["needs_adjudication"]
        checks.append(
            _check(
                "attention",
                "warn",
                f"{stuck} dead letter(s) or adjudication(s) wait for an operator",
            )
            if stuck
            else _check("attention", "ok", "none")
        )
    except KernelError as exc:
        checks.append(_check("database", "fail", f"{exc.code}: {exc.message}"))
    finally:
        kernel.close()
    checks.append(_broker_check(app))
    return checks


def _secret_files_check(app: Any) -> dict[str, str]:
    opened = open_secret_files(app)
    if opened:
        return _check(
            "secret files", "warn", "open to other users of this host: " + "; ".join(opened)
        )
    return _check("secret files", "ok", "the secrets file, users file and var folder are private")


def _passed_secrets_check(jobs: list[Job]) -> dict[str, str]:
    """Jobs whose command gets a worker variable that looks secret (``env_allow``)."""
    passing = []
    for job in jobs:
        payload = job.spec["payload"]
        if job.kind == "watchdog":
            payload = payload.get("check")
        names = payload.get("env_allow", []) if isinstance(payload, dict) else []
        secret = sorted(name for name in names if is_sensitive_name(name))
        if secret:
            passing.append(f"{job.id} ({', '.join(secret)})")
    if not passing:
        return _check("job env", "ok", "no job passes a secret-looking worker variable")
    return _check(
        "job env",
        "warn",
        f"jobs pass worker variables that look secret to their commands: {'; '.join(passing)}; "
        "refer to secrets by name instead (payload.secrets, KERNEL_SECRETS_FILE)",
    )


def _timeout_check(jobs: list[Job], default_timeout: float | None) -> dict[str, str]:
    """Jobs without a ``timeout``: unbounded unless ``kernel_default_timeout`` is set."""
    unbounded = sorted(job.id for job in jobs if job.spec.get("timeout") is None)
    if not unbounded:
        return _check("timeouts", "ok", "every job sets a timeout")
    named = ", ".join(unbounded)
    if default_timeout is not None:
        return _check(
            "timeouts",
            "ok",
            f"jobs without a timeout run at most kernel_default_timeout "
            f"({default_timeout:g}s): {named}",
        )
    return _check(
        "timeouts",
        "warn",
        f"jobs without a timeout may run forever: {named}; set their timeout, or "
        "KERNEL_DEFAULT_TIMEOUT / kernel_default_timeout for every job without one",
    )


def _attempts_check(jobs: list[Job]) -> dict[str, str]:
    """Each enabled job's effective attempts: runs that fail (retries, ``self.retry()``)
    spend ``max_attempts``; workers that die under it spend ``max_lost_leases`` instead."""
    effective = [
        f"{job.id} {job.spec.get('max_attempts', 1)} attempts, "
        f"{job.spec.get('max_lost_leases', MAX_LOST_LEASES)} lost leases"
        for job in sorted(jobs, key=lambda j: j.id)
        if job.enabled
    ]
    return _check("attempts", "ok", "; ".join(effective) or "no enabled job")


def _broker_check(app: Any) -> dict[str, str]:
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0.5, timeout=5)
            return _check("broker", "ok", masked_url(conn.as_uri()))
    except Exception as exc:  # any transport's failure is a finding, not a crash
        return _check("broker", "fail", masked_url(f"{type(exc).__name__}: {exc}"))


@command("doctor")
def doctor(env: Env) -> None:
    """Check settings, database schema, adapters, Beat and broker; exit 1 if any check fails.

    Then list every setting the kernel reads or sets, with where its value came from.
    """
    checks = _doctor_checks(env.app)
    ok = all(c["status"] != "fail" for c in checks)
    try:
        listing = settings_listing(env.app, KernelSettings.from_app(env.app))
    except KernelError:
        listing = []  # the settings check above names the refused one
    env.emit(
        {"ok": ok, "checks": checks, "settings": listing},
        lambda: (
            table(
                ("check", "status", "detail"),
                ((c["name"], c["status"].upper(), c["detail"]) for c in checks),
                full_last=True,
            )
            + "\n\n"
            + table(
                ("setting", "value", "from"),
                ((s["setting"], repr(s["value"]), s["source"]) for s in listing),
                full_last=True,
            )
        ),
    )
    if not ok:
        raise click.exceptions.Exit(1)
