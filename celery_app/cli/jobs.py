"""``kernel jobs ...``: apply job files, list, show, enable, disable, run now, delete, preview."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from beat_schedule.jobfiles import validate_job_file
from beat_schedule.timing import preview as preview_firings
from beat_schedule.timing import trigger_key
from celery_app.cli.actions import action_options, run_action
from celery_app.cli.output import Env, Instant, command, fields, format_age, format_json, iso, table
from kernel import Job, KernelError, NotFound
from kernel.redaction import redacted_spec

__all__ = ["jobs", "describe_schedule", "schedule_kind"]

jobs = click.Group("jobs", help="Job definitions: apply files, inspect, enable, run now.")


def schedule_kind(schedule: dict[str, Any] | None) -> str | None:
    """The trigger-key kind of a schedule: ``cron``, ``every`` or ``at`` (``in`` is ``at``)."""
    if schedule is None:
        return None
    return next(
        "at" if kind == "in" else kind for kind in ("cron", "every", "at", "in") if kind in schedule
    )


def describe_schedule(spec: dict[str, Any]) -> str:
    """One line for people: ``cron 0 2 * * * Europe/Berlin``, ``every 30s``, ``manual``."""
    schedule = spec.get("schedule")
    after = spec.get("after")
    if schedule is None:
        return f"after {after['job']} on {after['on']}" if after else "manual"
    if "cron" in schedule:
        return f"cron {schedule['cron']} {schedule['timezone']}"
    if "every" in schedule:
        return f"every {format_age(schedule['every'])}"
    if "in" in schedule:
        return f"in {format_age(schedule['in'])} from definition"
    return f"at {schedule['at']}"


@command("apply", jobs)
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--dry-run", is_flag=True, help="Validate and show what would change; write nothing.")
def _apply(env: Env, file: Path, dry_run: bool) -> None:
    """Apply a job file (JSON, TOML or YAML): create, update or leave each job.

    Every job is validated first and all are applied in one transaction: if any is
    refused, nothing is written.
    """
    specs = validate_job_file(file)
    results: list[dict[str, Any]]
    if dry_run:
        results = [
            {"id": spec.id, "change": _would_change(env, spec.id, spec.digest), "revision": None}
            for spec in specs
        ]
    else:
        try:
            applied = env.kernel.apply_jobs([spec.to_dict() for spec in specs])
        except KernelError as exc:
            # Every job validated, so this refusal needs the database (a chain cycle, a
            # concurrent edit); the one transaction rolled back and nothing was applied.
            exc.details.update(file=str(file), applied=[])
            raise
        results = [
            {"id": job.id, "change": change, "revision": job.revision} for job, change in applied
        ]
    data = {"file": str(file), "dry_run": dry_run, "jobs": results}

    def render() -> str:
        counts = {
            c: sum(r["change"] == c for r in results) for c in ("created", "updated", "unchanged")
        }
        verb = "would be " if dry_run else ""
        summary = f"{len(results)} job(s): " + ", ".join(
            f"{n} {verb}{c}" for c, n in counts.items()
        )
        return (
            table(
                ("id", "change", "revision"),
                ((r["id"], r["change"], r["revision"]) for r in results),
            )
            + "\n"
            + summary
        )

    env.emit(data, render)


def _would_change(env: Env, job_id: str, digest: str) -> str:
    try:
        current = env.kernel.get_job(job_id)
    except NotFound:
        return "created"
    return "unchanged" if current.digest == digest else "updated"


@command("list", jobs)
def _list(env: Env) -> None:
    """List job definitions."""
    found = env.kernel.list_jobs()
    env.emit(
        [_job_data(job) for job in found],
        lambda: table(
            ("id", "kind", "enabled", "rev", "schedule", "next fire (UTC)", "queue"),
            (
                (
                    j.id,
                    j.kind,
                    j.enabled,
                    j.revision,
                    describe_schedule(j.spec),
                    iso(j.next_fire_at),
                    j.queue,
                )
                for j in found
            ),
            empty="(no jobs)",
        ),
    )


def _job_data(job: Job) -> dict[str, Any]:
    """``job.to_dict()`` fit to print: stored secret-like values masked."""
    return {**job.to_dict(), "spec": redacted_spec(job.spec)}


def _job_fields(job: Job) -> str:
    return fields(
        [
            ("id", job.id),
            ("kind", job.kind),
            ("enabled", job.enabled),
            ("revision", job.revision),
            ("schedule", describe_schedule(job.spec)),
            ("next fire", iso(job.next_fire_at)),
            ("next trigger", job.next_trigger_key),
            ("queue", job.queue),
            ("digest", job.digest[:16]),
            ("defined", iso(job.defined_at)),
            ("updated", iso(job.updated_at)),
        ]
    )


@command("show", jobs)
@click.argument("job_id", metavar="JOB")
def _show(env: Env, job_id: str) -> None:
    """Show one job and its full normalised spec."""
    job = env.kernel.get_job(job_id)
    shown = _job_data(job)
    env.emit(shown, lambda: _job_fields(job) + "\nspec:\n" + format_json(shown["spec"], indent=2))


def _set_enabled(env: Env, job_id: str, enabled: bool) -> None:
    job, changed = env.kernel.set_job_enabled(job_id, enabled)
    word = "enabled" if enabled else "disabled"
    env.emit(
        {"job": _job_data(job), "changed": changed},
        lambda: f"job {job.id} {word}" + ("" if changed else f" (it was already {word})"),
    )


@command("enable", jobs)
@click.argument("job_id", metavar="JOB")
def _enable(env: Env, job_id: str) -> None:
    """Enable a job; Beat plans it from now (missed firings while disabled are not owed)."""
    _set_enabled(env, job_id, True)


@command("disable", jobs)
@click.argument("job_id", metavar="JOB")
def _disable(env: Env, job_id: str) -> None:
    """Disable a job: no new firings; manual run-now still works."""
    _set_enabled(env, job_id, False)


@command("delete", jobs)
@click.argument("job_id", metavar="JOB")
def _delete(env: Env, job_id: str) -> None:
    """Delete a job definition (refused while it has unsettled occurrences)."""
    env.kernel.delete_job(job_id)
    env.emit({"deleted": job_id}, lambda: f"job {job_id} deleted")


@command("run-now", jobs)
@click.argument("job_id", metavar="JOB")
@action_options
def _run_now(env: Env, job_id: str, request_id: str | None, operator: str | None) -> None:
    """Create an occurrence now (also for a disabled job); the schedule is not disturbed."""
    run_action(
        env,
        request_id,
        operator,
        lambda rid, who: env.kernel.run_now(job_id, request_id=rid, operator=who),
    )


@command("preview", jobs)
@click.argument("job_id", metavar="JOB")
@click.option(
    "--next",
    "count",
    type=click.IntRange(1, 1000),
    default=5,
    show_default=True,
    help="How many firings.",
)
@click.option("--after", type=Instant(), default=None, help="Start after this time (default: now).")
def _preview(env: Env, job_id: str, count: int, after: Any) -> None:
    """The next firings of a job, in its wall-clock time and in UTC, DST policy applied."""
    job = env.kernel.get_job(job_id)
    schedule = job.spec["schedule"]
    start = after or env.kernel.now()
    kind = schedule_kind(schedule)
    upcoming = preview_firings(schedule, job.spec["dst"], start, count, anchor=job.defined_at)
    firings = (
        [
            {"utc": iso(utc), "local": local.isoformat(), "trigger_key": trigger_key(kind, utc)}
            for utc, local in upcoming
        ]
        if kind
        else []
    )
    data = {
        "job_id": job.id,
        "enabled": job.enabled,
        "schedule": schedule,
        "dst": job.spec["dst"],
        "after": iso(start),
        "firings": firings,
    }

    def render() -> str:
        head = f"job {job.id}: {describe_schedule(job.spec)}"
        if not job.enabled:
            head += " (disabled: Beat will not fire these until it is enabled)"
        rows = table(
            ("#", "UTC", "local", "trigger key"),
            ((n, f["utc"], f["local"], f["trigger_key"]) for n, f in enumerate(firings, 1)),
            empty="(no upcoming firings)",
        )
        return f"{head}\n{rows}"

    env.emit(data, render)
