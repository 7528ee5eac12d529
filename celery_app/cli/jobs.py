"""``kernel jobs ...``: apply job files, list, show, enable, disable, run now, cancel, delete,
preview."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from celery_app import operations
from celery_app.cli.actions import action_options, default_operator, run_action
from celery_app.cli.output import Env, Instant, command, fields, table
from celery_app.cli.settings_report import job_zone
from celery_app.definitions import apply_specs, read_app_job_file
from celery_app.operations import format_json, iso
from kernel import Job, JobHealth, KernelError

__all__ = ["jobs"]

jobs = click.Group("jobs", help="Job definitions: apply files, inspect, enable, run now.")


@command("apply", jobs)
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--dry-run", is_flag=True, help="Validate and show what would change; write nothing.")
@click.option(
    "--allow-kind",
    "allow_kinds",
    multiple=True,
    metavar="KIND",
    help="Accept this kind though no adapter of it is installed here (only on the workers).",
)
@click.option(
    "--expected-revision",
    type=click.IntRange(1),
    default=None,
    metavar="N",
    help="Revise only if the job is still at revision N (the file holds one job); "
    "REVISION_CONFLICT otherwise.",
)
def _apply(
    env: Env,
    file: Path,
    dry_run: bool,
    allow_kinds: tuple[str, ...],
    expected_revision: int | None,
) -> None:
    """Apply a job file (JSON, TOML or YAML): create, update or leave each job.

    Every job is validated first and all are applied in one transaction with the
    file's ``pools:`` limits: if any is refused, nothing is written. A kind no
    installed adapter runs is refused.
    """
    job_file = read_app_job_file(env.app, file, allow_kinds)
    try:
        data = {
            "file": str(file),
            **apply_specs(
                env.kernel,
                env.app,
                job_file.jobs,
                dry_run=dry_run,
                expected_revision=expected_revision,
                allow_kinds=allow_kinds,
                file=str(file),
                operator=default_operator(),
                pools=job_file.pools,
                shared_budgets=job_file.budgets,
            ),
            "pools": job_file.pools,
        }
    except KernelError as exc:
        # Every job validated, so this refusal needs the database (a chain cycle, a
        # concurrent edit); the one transaction rolled back and nothing was applied.
        exc.details.update(file=str(file), applied=[])
        raise
    if job_file.budgets:
        data["budgets"] = sorted(job_file.budgets)
    results = data["jobs"]

    def render() -> str:
        counts = {
            c: sum(r["change"] == c for r in results) for c in ("created", "updated", "unchanged")
        }
        verb = "would be " if dry_run else ""
        summary = f"{len(results)} job(s): " + ", ".join(
            f"{n} {verb}{c}" for c, n in counts.items()
        )
        if job_file.pools:
            limits = ", ".join(f"{name} {limit}" for name, limit in sorted(job_file.pools.items()))
            summary += f"\npool limits {verb}set: {limits}"
        return (
            table(
                ("id", "change", "revision"),
                ((r["id"], r["change"], r["revision"]) for r in results),
            )
            + "\n"
            + summary
        )

    env.emit(data, render)


@command("list", jobs)
def _list(env: Env) -> None:
    """List job definitions and their health."""
    found = operations.jobs_with_health(env.kernel)
    env.emit(
        [operations.job_data(job, health) for job, health in found],
        lambda: table(
            (
                "id",
                "kind",
                "enabled",
                "rev",
                "schedule",
                "next fire (UTC)",
                "queue",
                "last success",
                "last failure",
                "fails",
            ),
            (
                (
                    j.id,
                    j.kind,
                    j.enabled,
                    j.revision,
                    operations.describe_schedule(j.spec),
                    iso(j.next_fire_at),
                    j.queue,
                    *_health_cells(health),
                )
                for j, health in found
            ),
            empty="(no jobs)",
        ),
    )


def _health_cells(health: JobHealth | None) -> tuple[str | None, str | None, int | None]:
    if health is None:
        return None, None, None
    return (
        iso(health.last_success_at),
        iso(health.last_failure_at),
        health.consecutive_failures,
    )


def _job_fields(job: Job, health: JobHealth | None) -> str:
    last_success, last_failure, fails = _health_cells(health)
    return fields(
        [
            ("id", job.id),
            ("kind", job.kind),
            ("enabled", job.enabled),
            ("revision", job.revision),
            ("schedule", operations.describe_schedule(job.spec)),
            ("next fire", iso(job.next_fire_at)),
            ("next trigger", job.next_trigger_key),
            ("queue", job.queue),
            ("digest", job.digest[:16]),
            ("defined", iso(job.defined_at)),
            ("updated", iso(job.updated_at)),
            ("last success", last_success),
            ("last failure", last_failure),
            ("fails in row", fails),
        ]
    )


@command("show", jobs)
@click.argument("job_id", metavar="JOB")
def _show(env: Env, job_id: str) -> None:
    """Show one job and its full normalised spec."""
    job = env.kernel.get_job(job_id)
    health = env.kernel.job_health(job_id).get(job_id)
    shown = operations.job_data(job, health)
    env.emit(
        shown,
        lambda: _job_fields(job, health) + "\nspec:\n" + format_json(shown["spec"], indent=2),
    )


def _set_enabled(env: Env, job_id: str, enabled: bool) -> None:
    data = operations.set_job_enabled(env.kernel, job_id, enabled, default_operator())
    word = "enabled" if enabled else "disabled"
    env.emit(
        data,
        lambda: f"job {job_id} {word}" + ("" if data["changed"] else f" (it was already {word})"),
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
    deleted = operations.delete_job(env.kernel, job_id, default_operator())
    env.emit(deleted, lambda: f"job {job_id} deleted")


@command("run-now", jobs)
@click.argument("job_id", metavar="JOB")
@action_options
@click.option(
    "--force",
    is_flag=True,
    help="Run even if the job's overlap policy or max_queued refuses another occurrence.",
)
@click.option(
    "--params",
    metavar="JSON",
    default=None,
    help="This run's arguments as a JSON object: args, kwargs (an http job's json or body), "
    "merged into its payload only (JSON Merge Patch: null removes a key); any other field "
    "is the job's definition and refused.",
)
def _run_now(
    env: Env,
    job_id: str,
    request_id: str | None,
    operator: str | None,
    force: bool,
    params: str | None,
) -> None:
    """Create an occurrence now (also for a disabled job); the schedule is not disturbed.

    It is admitted like a firing: refused while the overlap policy (skip) or the
    backlog bound (max_queued) says no, unless --force. A retry with the same
    --request-id and other --params is refused.
    """
    action = operations.run_now(env.kernel, job_id, force, operations.parse_params(params))
    run_action(env, request_id, operator, action)


@command("cancel", jobs)
@click.argument("job_id", metavar="JOB")
@click.option("--cascade", is_flag=True, help="Also cancel every job chained after it.")
@action_options
def _cancel(
    env: Env, job_id: str, cascade: bool, request_id: str | None, operator: str | None
) -> None:
    """Disable a job, cancel its waiting occurrences and ask its running ones to stop.

    With --cascade the same happens to the jobs chained after it (recursively). A retry
    with the same --request-id is answered, not redone.
    """
    data = operations.cancel_job(
        env.kernel,
        job_id,
        cascade,
        request_id if request_id is not None else operations.new_request_id(),
        operator if operator is not None else default_operator(),
    )

    def render() -> str:
        replay = " (deduplicated: this request id was already applied)"
        return fields(
            [
                ("request id", data["request_id"] + (replay if data["deduplicated"] else "")),
                ("jobs", ", ".join(data["jobs"])),
                ("disabled", ", ".join(data["disabled"]) or "-"),
                ("cancelled", ", ".join(map(str, data["cancelled"])) or "-"),
                ("asked to stop", ", ".join(map(str, data["stopping"])) or "-"),
            ]
        )

    env.emit(data, render)


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
    data = operations.preview(env.kernel, job_id, count, after)
    firings = data["firings"]
    spec = env.kernel.get_job(job_id).spec
    data["zone"] = zone = job_zone(env.app, job_id, spec)

    def render() -> str:
        head = f"job {job_id}: {operations.describe_schedule(spec)}"
        if zone is not None:
            head += f"\nzone {zone['name']} ({zone['from']})"
        if not data["enabled"]:
            head += " (disabled: Beat will not fire these until it is enabled)"
        rows = table(
            ("#", "UTC", "local", "trigger key"),
            ((n, f["utc"], f["local"], f["trigger_key"]) for n, f in enumerate(firings, 1)),
            empty="(no upcoming firings)",
        )
        return f"{head}\n{rows}"

    env.emit(data, render)
