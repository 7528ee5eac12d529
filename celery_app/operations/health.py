"""The kernel's health as operators see it: counts, Beats, watchdog warnings, refused entries."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from beat_schedule.sync import drift, read_beat_schedule, still_fires
from celery_app.operations.times import format_age, iso
from celery_app.settings import KernelSettings
from celery_app.shell import celery_command
from kernel import Beat, Kernel

__all__ = [
    "STALE_BEAT_FACTOR",
    "beat_health",
    "beat_warning",
    "schedule_findings",
    "status",
    "watchdog_warnings",
]


#: A Beat that has not ticked for this many of its intervals is considered stopped.
STALE_BEAT_FACTOR = 3


def beat_health(beats: list[Beat], now: datetime, retention_s: float) -> list[dict[str, Any]]:
    """Each Beat's last tick, its age and whether it is stale (> 3× its interval).

    Beats silent for longer than ``retention_s`` are left out: they stopped long ago
    (Beat and ``kernel prune`` remove them from the registry).
    """
    rows = []
    for beat in beats:
        age = (now - beat.last_tick_at).total_seconds()
        if age > retention_s:
            continue
        rows.append(
            {
                "id": beat.id,
                "host": beat.host,
                "interval_s": beat.interval_s,
                "last_tick_at": iso(beat.last_tick_at),
                "age_s": round(age, 3),
                "stale": age > STALE_BEAT_FACTOR * beat.interval_s,
            }
        )
    return rows


def beat_warning(beats: list[dict[str, Any]], retention_s: float, app: Any) -> str | None:
    """What to tell an operator when no Beat is ticking; None when one is."""
    if not beats:
        return (
            f"no Beat has ticked in the last {format_age(retention_s)}: start "
            f"`{celery_command(app, 'beat')}`; nothing is scheduled"
        )
    if all(b["stale"] for b in beats):
        return (
            f"no Beat has ticked within {STALE_BEAT_FACTOR}x its interval: is Beat running? "
            "due firings are not created and hints are not re-published"
        )
    return None


def schedule_findings(app: Any, kernel: Kernel | None) -> dict[str, list[dict[str, Any]]]:
    """What of the app's ``beat_schedule`` Beat does not apply as written.

    ``refused``: each refused entry with why (naming the entry) and, when its job is
    still enabled, the revision it keeps firing (``fires_revision``). ``changed``: each
    entry that differs from its job as the kernel holds it (Beat makes a new revision at
    its next start; an entry drawn at import does so at every start). Without a kernel
    only the refusals are known.
    """
    schedule = read_beat_schedule(app.conf, app.tasks, app=app)
    jobs = {job.id: job for job in kernel.list_jobs()} if kernel is not None else {}
    refused, changed = [], []
    for entry in schedule.entries:
        job = jobs.get(entry.job_id) if entry.job_id else None
        if entry.refused:
            fires = still_fires(entry, job)
            refused.append(
                {
                    "entry": entry.name,
                    "reason": entry.refused + fires,
                    "fires_revision": job.revision if fires and job else None,
                }
            )
        elif (detail := drift(entry, job)) is not None and job is not None:
            changed.append(
                {"entry": entry.name, "job_id": job.id, "revision": job.revision, "detail": detail}
            )
    return {"refused": refused, "changed": changed}


def status(kernel: Kernel, app: Any) -> dict[str, Any]:
    """Counts per status, pauses, expiring leases, dead letters, Beats and warnings."""
    settings = KernelSettings.from_app(app)
    retention = settings.beat_retention
    counted = kernel.status()
    now = datetime.fromtimestamp(counted["now_ms"] / 1000, UTC)
    beats = beat_health(kernel.beats(), now, retention)
    counts = counted["counts"]
    age_ms = counted["oldest_claimable_age_ms"]
    oldest_id = counted["oldest_claimable_id"]
    oldest_blocker = None if oldest_id is None else kernel.blocker(oldest_id)
    warning = beat_warning(beats, retention, app)
    watch = kernel.watchdog(grace=settings.watchdog_grace, default_timeout=settings.default_timeout)
    findings = schedule_findings(app, kernel)
    return {
        "now": iso(now),
        "counts": counts,
        "paused": counted["paused"],
        "leases_expiring_10s": counted["leases_expiring_10s"],
        "dead_letters": counts["dead_letter"],
        "needs_adjudication": counts["needs_adjudication"],
        "oldest_claimable_age_s": None if age_ms is None else age_ms / 1000,
        "oldest_claimable_id": oldest_id,
        # What the oldest waits for (kind "none": only a worker to take it).
        "oldest_claimable_blocker": oldest_blocker.to_dict() if oldest_blocker else None,
        "beats": beats,
        "warnings": ([warning] if warning else [])
        + watchdog_warnings(watch)
        + _unplannable_warnings(counted["unplannable"]),
        "watchdog": watch,
        "unplannable_jobs": counted["unplannable"],
        "refused_entries": findings["refused"],
        "changed_entries": findings["changed"],
    }


def _unplannable_warnings(found: list[dict[str, Any]]) -> list[str]:
    """One warning per enabled job Beat cannot plan (``Kernel.status``'s ``unplannable``)."""
    return [
        f"job {j['job_id']} (revision {j['revision']}) cannot be planned, none of its runs "
        f"is made: {j['error']}; fix its schedule and re-apply it"
        for j in found
    ]


def watchdog_warnings(watch: dict[str, Any]) -> list[str]:
    """What the watchdog's findings (:meth:`Kernel.watchdog`) ask of an operator."""
    grace = format_age(watch["grace_ms"] / 1000)
    warnings = []
    if watch["overdue_firings"]:
        jobs = ", ".join(o["job_id"] for o in watch["overdue"][:5])
        warnings.append(
            f"{watch['overdue_firings']} job(s) should have fired more than {grace} ago and "
            f"did not ({jobs}): is Beat running and keeping up?"
        )
    if watch["overrunning"]:
        runs = ", ".join(str(o["occurrence_id"]) for o in watch["overrunning"][:5])
        warnings.append(
            f"{len(watch['overrunning'])} run(s) are past their timeout by more than {grace} "
            f"(occurrences {runs}): is their worker alive?"
        )
    if watch["stranded"]:
        waiting = ", ".join(str(o["occurrence_id"]) for o in watch["stranded"][:5])
        warnings.append(
            f"{len(watch['stranded'])} occurrence(s) could run for more than {grace}, nothing "
            f"holds them, and no worker took them (occurrences {waiting}): is a worker "
            "consuming their queue? `kernel why OCCURRENCE`"
        )
    if watch["needs_adjudication"]:
        warnings.append(
            f"{watch['needs_adjudication']} occurrence(s) await adjudication (oldest "
            f"{format_age((watch['oldest_adjudication_age_ms'] or 0) / 1000)}): "
            "`kernel occurrences list --status needs_adjudication`, then `kernel adjudicate`"
        )
    for failing in watch["failing_watchdogs"]:
        exit_code = failing["exit_code"]
        how = failing["reason"] if exit_code is None else f"exit code {exit_code}"
        warnings.append(
            f"watchdog {failing['job_id']} is failing ({how}, checked "
            f"{format_age(failing['age_ms'] / 1000)} ago): {failing['message']}; "
            f"`kernel occurrences show {failing['occurrence_id']}`"
        )
    return warnings
