"""Job definitions and resource pools as shown and administered: data, previews, enable,
delete, pool limits."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from beat_schedule.timing import preview as preview_firings
from celery_app.operations.times import format_age, iso, within_calendar
from kernel import Job, JobHealth, Kernel, redacted_spec

__all__ = [
    "describe_schedule",
    "job_data",
    "jobs_with_health",
    "job_with_health",
    "preview",
    "set_job_enabled",
    "delete_job",
    "pools_set",
    "pools_list",
]


def describe_schedule(spec: dict[str, Any]) -> str:
    """One line for people: ``cron 0 2 * * * Europe/Berlin``, ``every 30s``, ``manual``."""
    schedule = spec.get("schedule")
    after = spec.get("after")
    if schedule is None and after and "all" in after:
        return f"after all of {', '.join(after['all'])} (within {format_age(after['within'])})"
    if schedule is None:
        return f"after {after['job']} on {after['on']}" if after else "manual"
    if "cron" in schedule:
        both = " (day of month and weekday must both match)" if schedule.get("day_match") else ""
        return f"cron {schedule['cron']} {schedule['timezone']}{both}"
    if "every" in schedule:
        return f"every {format_age(schedule['every'])}"
    if "in" in schedule:
        return f"in {format_age(schedule['in'])} from definition"
    return f"at {schedule['at']}"


def job_data(job: Job, health: JobHealth | None = None) -> dict[str, Any]:
    """``job.to_dict()`` fit to show: stored secret-like values masked; with ``health``,
    its figures under ``health``."""
    shown = {**job.to_dict(), "spec": redacted_spec(job.spec)}
    if health is not None:
        shown["health"] = health.to_dict()
    return shown


def jobs_with_health(kernel: Kernel) -> list[tuple[Job, JobHealth | None]]:
    """Every job and its health (None for a job defined between the two reads)."""
    health = kernel.job_health()
    return [(job, health.get(job.id)) for job in kernel.list_jobs()]


def job_with_health(kernel: Kernel, job_id: str) -> dict[str, Any]:
    """One job as :func:`job_data` shows it, with its health."""
    return job_data(kernel.get_job(job_id), kernel.job_health(job_id).get(job_id))


def preview(kernel: Kernel, job_id: str, count: int, after: datetime | None) -> dict[str, Any]:
    """The next ``count`` firings of a job after ``after`` (default: now), DST policy applied."""
    job = kernel.get_job(job_id)
    schedule = job.spec["schedule"]
    start = after or kernel.now()
    with within_calendar("next", f"a firing among the next {count} after {iso(start)}"):
        ahead = preview_firings(
            schedule, job.spec["dst"], start, count, anchor=job.defined_at, job_id=job.id
        )
    # Under jitter "utc" is when the firing comes due; its trigger key names the instant.
    firings = [
        {"utc": iso(firing.at), "local": local.isoformat(), "trigger_key": firing.trigger_key}
        for firing, local in ahead
    ]
    return {
        "job_id": job.id,
        "enabled": job.enabled,
        "schedule": schedule,
        "dst": job.spec["dst"],
        "after": iso(start),
        "firings": firings,
    }


# -- job administration ---------------------------------------------------------


def set_job_enabled(
    kernel: Kernel, job_id: str, enabled: bool, operator: str | None = None
) -> dict[str, Any]:
    """Enable or disable a job; ``changed`` is false when it already was."""
    job, changed = kernel.set_job_enabled(job_id, enabled, operator=operator)
    return {"job": job_data(job), "changed": changed}


def delete_job(kernel: Kernel, job_id: str, operator: str | None = None) -> dict[str, Any]:
    """Delete a job definition (refused while it has unsettled occurrences)."""
    kernel.delete_job(job_id, operator=operator)
    return {"deleted": job_id}


def pools_set(kernel: Kernel, name: str, limit: int) -> dict[str, Any]:
    """Define a pool or change its limit; ``changed`` is false when it already had it."""
    pool, changed = kernel.set_pool_limit(name, limit)
    return {"pool": pool.to_dict(), "changed": changed}


def pools_list(kernel: Kernel) -> list[dict[str, Any]]:
    """Every pool with its limit, running and waiting counts, by name."""
    return [pool.to_dict() for pool in kernel.pools()]
