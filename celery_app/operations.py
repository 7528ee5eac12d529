"""What the CLI and the HTTP API both do: resource shapes and operator actions.

Every function takes an open :class:`~kernel.Kernel` and returns JSON-ready data,
the shape ``kernel ... --json`` prints and ``/api/...`` answers. The kernel's
operator calls are made here and nowhere else, so a change to their parameters is
adapted in one module. Refusals are the kernel's :class:`~kernel.KernelError`;
an action's refusal carries the request id it was made under.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from adapters import load_adapters
from adapters.registry import declared_safe_points
from beat_schedule.sync import read_beat_schedule
from beat_schedule.timing import preview as preview_firings
from beat_schedule.timing import trigger_key
from celery_app.config import KernelSettings
from kernel import (
    ActionResult,
    Beat,
    EventType,
    Job,
    Kernel,
    KernelError,
    Occurrence,
    OccurrenceStatus,
    PauseUnsupported,
    SafePoint,
)
from kernel.durations import text
from kernel.redaction import redacted_spec

__all__ = [
    "STALE_BEAT_FACTOR",
    "act",
    "adjudicate",
    "approve",
    "beat_health",
    "beat_warning",
    "cancel",
    "cancel_job",
    "delete_job",
    "events",
    "format_age",
    "iso",
    "job_data",
    "new_request_id",
    "occurrence_detail",
    "occurrence_events",
    "output_chunks",
    "pause",
    "preview",
    "refused_entries",
    "prune",
    "reject",
    "requeue",
    "resume",
    "runtime_controls",
    "run_now",
    "safe_points",
    "schedule_kind",
    "set_job_enabled",
    "status",
    "utc",
    "watchdog_warnings",
]

#: A Beat that has not ticked for this many of its intervals is considered stopped.
STALE_BEAT_FACTOR = 3
_EVENT_PAGE = 1000
_IDENT = text(128)


# -- reads ----------------------------------------------------------------------


def utc(moment: datetime) -> datetime:
    """``moment`` in UTC; a naive one is read as UTC."""
    return moment.replace(tzinfo=UTC) if moment.utcoffset() is None else moment.astimezone(UTC)


def iso(value: datetime | None) -> str | None:
    """UTC ISO 8601 with a ``Z``; None stays None."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def format_age(seconds: float | None) -> str:
    """A short human duration: ``0.25s``, ``45s``, ``3m05s``, ``2h10m``, ``4d3h``."""
    if seconds is None:
        return "-"
    if abs(seconds) < 1:
        return f"{seconds:.3f}".rstrip("0").rstrip(".") + "s"
    whole = int(round(seconds))
    sign, whole = ("-", -whole) if whole < 0 else ("", whole)
    if whole < 60:
        return f"{sign}{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{sign}{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{sign}{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{sign}{days}d{hours}h"


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


def beat_warning(beats: list[dict[str, Any]], retention_s: float) -> str | None:
    """What to tell an operator when no Beat is ticking; None when one is."""
    if not beats:
        return (
            f"no Beat has ticked in the last {format_age(retention_s)}: start "
            "`celery -A celery_app beat`; nothing is scheduled"
        )
    if all(b["stale"] for b in beats):
        return (
            f"no Beat has ticked within {STALE_BEAT_FACTOR}x its interval: is Beat running? "
            "due firings are not created and hints are not re-published"
        )
    return None


def refused_entries(app: Any) -> list[dict[str, str]]:
    """The app's ``beat_schedule`` entries Beat refuses, with why (the reason names the entry)."""
    schedule = read_beat_schedule(app.conf, app.tasks)
    return [{"entry": e.name, "reason": str(e.refused)} for e in schedule.entries if e.refused]


def status(kernel: Kernel, app: Any) -> dict[str, Any]:
    """Counts per status, pauses, expiring leases, dead letters, Beats and warnings."""
    retention = KernelSettings.from_app(app).beat_retention
    counted = kernel.status()
    now = datetime.fromtimestamp(counted["now_ms"] / 1000, UTC)
    beats = beat_health(kernel.beats(), now, retention)
    counts = counted["counts"]
    age_ms = counted["oldest_claimable_age_ms"]
    warning = beat_warning(beats, retention)
    watch = kernel.watchdog(grace=KernelSettings.from_app(app).watchdog_grace)
    return {
        "now": iso(now),
        "counts": counts,
        "paused": counted["paused"],
        "leases_expiring_10s": counted["leases_expiring_10s"],
        "dead_letters": counts["dead_letter"],
        "needs_adjudication": counts["needs_adjudication"],
        "oldest_claimable_age_s": None if age_ms is None else age_ms / 1000,
        "beats": beats,
        "warnings": ([warning] if warning else []) + watchdog_warnings(watch),
        "watchdog": watch,
        "refused_entries": refused_entries(app),
    }


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


def events(
    kernel: Kernel,
    after_id: int,
    job_id: str | None,
    occurrence_id: int | None,
    limit: int,
    before_id: int | None = None,
) -> dict[str, Any]:
    """One page of the event log, oldest first, and whether more lie beyond it.

    After ``after_id`` by default; with ``before_id`` the page ends just before it
    (paging back). ``more`` says whether the direction paged has more events.
    """
    scope: dict[str, Any] = {"job_id": job_id, "occurrence_id": occurrence_id}
    found = kernel.events(after_id=after_id, before_id=before_id, limit=limit, **scope)
    if before_id is None:
        last = found[-1].id if found else after_id
        more = bool(found) and bool(kernel.events(after_id=last, limit=1, **scope))
    else:
        first = found[0].id if found else before_id
        more = bool(found) and bool(
            kernel.events(after_id=after_id, before_id=first, limit=1, **scope)
        )
    return {
        "events": [event.to_dict() for event in found],
        "first_id": found[0].id if found else None,
        "last_id": found[-1].id if found else after_id,
        "more": more,
    }


def occurrence_events(kernel: Kernel, occurrence_id: int) -> list[dict[str, Any]]:
    """Every event of one occurrence, oldest first."""
    found: list[dict[str, Any]] = []
    after = 0
    while True:
        page = kernel.events(after_id=after, occurrence_id=occurrence_id, limit=_EVENT_PAGE)
        found.extend(event.to_dict() for event in page)
        if len(page) < _EVENT_PAGE:
            return found
        after = page[-1].id


def runtime_controls(kernel: Kernel, limit: int) -> list[dict[str, Any]]:
    """Running, pause-requested and paused occurrences, most recently changed first."""
    return [
        {
            **row,
            "lease_expires_at": iso(_instant(row["lease_expires_at"])),
            "updated_at": iso(_instant(row["updated_at"])),
        }
        for row in kernel.runtime_controls(limit)
    ]


def _instant(value: datetime | int | None) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromtimestamp(value / 1000, UTC)


def occurrence_detail(kernel: Kernel, occurrence_id: int) -> dict[str, Any]:
    """One occurrence with its checkpoint, result, definition (secrets masked), the tail of
    its run output and every other event."""
    occ = kernel.get_occurrence(occurrence_id)
    everything = occurrence_events(kernel, occurrence_id)
    excerpt_limit = int(occ.definition.get("output", {}).get("excerpt", 2048))
    return {
        **occ.to_dict(),
        "checkpoint": occ.checkpoint,
        "result": occ.result,
        "definition": redacted_spec(occ.definition),
        "output_excerpt": _excerpt(output_chunks(everything), excerpt_limit),
        "output_excerpt_limit": excerpt_limit,
        "events": [e for e in everything if e["type"] != EventType.RUN_OUTPUT],
    }


def output_chunks(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run output held by ``run_output`` events, one dict per chunk, oldest first."""
    return [
        {"event_id": e["id"], "at": e["at"], "fence": e["fence"], **chunk}
        for e in events
        if e["type"] == EventType.RUN_OUTPUT
        for chunk in e["data"]["output"]
    ]


def _excerpt(chunks: list[dict[str, Any]], limit: int) -> str:
    """The last ``limit`` bytes of the newest fence's output."""
    if not chunks:
        return ""
    newest = chunks[-1]["fence"]
    text = "".join(c["text"] for c in chunks if c["fence"] == newest).encode()
    cut = text[-limit:] if limit else b""
    return ("..." if len(cut) < len(text) else "") + cut.decode(errors="ignore")


def job_data(job: Job) -> dict[str, Any]:
    """``job.to_dict()`` fit to show: stored secret-like values masked."""
    return {**job.to_dict(), "spec": redacted_spec(job.spec)}


def schedule_kind(schedule: dict[str, Any] | None) -> str | None:
    """The trigger-key kind of a schedule: ``cron``, ``every`` or ``at`` (``in`` is ``at``)."""
    if schedule is None:
        return None
    return next(
        "at" if kind == "in" else kind for kind in ("cron", "every", "at", "in") if kind in schedule
    )


def preview(kernel: Kernel, job_id: str, count: int, after: datetime | None) -> dict[str, Any]:
    """The next ``count`` firings of a job after ``after`` (default: now), DST policy applied."""
    job = kernel.get_job(job_id)
    schedule = job.spec["schedule"]
    start = after or kernel.now()
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


# -- resource pools -------------------------------------------------------------


def pools_set(kernel: Kernel, name: str, limit: int) -> dict[str, Any]:
    """Define a pool or change its limit; ``changed`` is false when it already had it."""
    pool, changed = kernel.set_pool_limit(name, limit)
    return {"pool": pool.to_dict(), "changed": changed}


def pools_list(kernel: Kernel) -> list[dict[str, Any]]:
    """Every pool with its limit, running and waiting counts, by name."""
    return [pool.to_dict() for pool in kernel.pools()]


def prune(kernel: Kernel, app: Any, older_than_s: float, limit: int) -> dict[str, Any]:
    """Delete settled history older than ``older_than_s`` seconds, and forget Beats silent
    for longer than the Beat retention (``beats_forgotten``: their ids)."""
    pruned = kernel.prune(older_than=timedelta(seconds=older_than_s), limit=limit)
    retention = KernelSettings.from_app(app).beat_retention
    forgotten = kernel.forget_silent_beats(silent_for=retention)
    return {
        "older_than_s": older_than_s,
        **pruned,
        "beats_forgotten": forgotten,
        "beat_retention_s": retention,
    }


# -- operator actions -----------------------------------------------------------

Action = Callable[[str, str], ActionResult]


def new_request_id() -> str:
    """A fresh idempotency key for an action whose caller gave none."""
    return uuid.uuid4().hex


def act(app: Any, request_id: str, operator: str, action: Action) -> dict[str, Any]:
    """Run ``action(request_id, operator)``; the result as the CLI's ``--json`` shows it.

    A replay with the same request id is answered ``deduplicated`` by the kernel; a
    refusal carries the request id so an uncertain outcome can be retried. A running
    occurrence asked to stop gets a ``note`` saying how it will stop.
    """
    rid = _IDENT(request_id, "request_id")
    who = _IDENT(operator, "operator")
    try:
        result = action(rid, who)
    except KernelError as exc:
        exc.details.setdefault("request_id", rid)
        raise
    occ = result.occurrence
    data: dict[str, Any] = {
        "request_id": result.request_id,
        "deduplicated": result.deduplicated,
        "operator": who,
        "occurrence": occ.to_dict(),
    }
    if occ.status == OccurrenceStatus.RUNNING and occ.cancel_requested:
        data["note"] = _stop_note(app, occ)
    return data


def _stop_note(app: Any, occ: Occurrence) -> str:
    if set(safe_points(app, occ)) <= {_BEFORE_EXECUTE}:
        return (
            f"it runs {_what_runs(occ)}, which has no safe point while it runs: "
            "it will finish its current run, which is recorded as it ends and not retried"
        )
    return "it will stop at its next safe point (or finish, if it reaches none)"


_BEFORE_EXECUTE = SafePoint.BEFORE_EXECUTE.value


def safe_points(app: Any, occ: Occurrence) -> tuple[str, ...]:
    """What the occurrence's adapter declares for its payload (none if not installed here)."""
    adapter = load_adapters(app).get(occ.kind)
    return declared_safe_points(adapter, occ.payload) if adapter is not None else ()


def _what_runs(occ: Occurrence) -> str:
    task = occ.payload.get("task") if occ.kind == "task" else None
    return f"task {task!r}" if task else f"a {occ.kind!r} job"


def pause(kernel: Kernel, app: Any, occurrence_id: int, fence: int | None = None) -> Action:
    """Ask a running occurrence to pause (only the run under ``fence``, when given)."""

    def run(rid: str, who: str) -> ActionResult:
        occ = kernel.get_occurrence(occurrence_id)
        declared = safe_points(app, occ)
        if occ.status == OccurrenceStatus.RUNNING and set(declared) <= {_BEFORE_EXECUTE}:
            # Its only safe point is behind it: accepting would leave the request pending
            # until the run ends on its own.
            raise PauseUnsupported(
                f"occurrence {occurrence_id} is running {_what_runs(occ)}, which has no safe "
                "point while it runs (a task opts in with kernel_checkpoints=True and calls "
                "current_run.checkpoint()); it cannot be paused now. Cancel it instead: it "
                "will finish its current run",
                occurrence_id=occurrence_id,
            )
        return kernel.request_pause(
            occurrence_id,
            expected_fence=fence,  # only what the caller gave is evidence (SPEC I7)
            request_id=rid,
            safe_points=declared,
            operator=who,
        )

    return run


def resume(kernel: Kernel, occurrence_id: int, revision: int | None = None) -> Action:
    """Make a paused occurrence claimable again (only at control ``revision`` if given)."""
    return lambda rid, who: kernel.resume(
        occurrence_id, request_id=rid, operator=who, expected_revision=revision
    )


def requeue(
    kernel: Kernel, occurrence_id: int, fence: int | None = None, error_code: str | None = None
) -> Action:
    """Give a dead letter one more run (only if ``fence``/``error_code`` hold, when given).

    Only what the caller gave is evidence (SPEC I7): a replay of the request after the
    state moved on is answered with the first result, not refused.
    """
    return lambda rid, who: kernel.requeue(
        occurrence_id,
        expected_fence=fence,
        expected_error_code=error_code,
        request_id=rid,
        operator=who,
    )


def adjudicate(kernel: Kernel, occurrence_id: int, decision: str) -> Action:
    """Decide an at-most-once occurrence whose outcome is unknown."""
    return lambda rid, who: kernel.adjudicate(
        occurrence_id, decision=decision, request_id=rid, operator=who
    )


def cancel(kernel: Kernel, occurrence_id: int) -> Action:
    """Cancel a waiting occurrence, or ask a running one to stop."""
    return lambda rid, who: kernel.cancel(occurrence_id, request_id=rid, operator=who)


def run_now(kernel: Kernel, job_id: str, force: bool = False) -> Action:
    """Create an occurrence of a job now (also for a disabled job), admitted like a firing
    (overlap policy, ``max_queued``) unless ``force``."""
    return lambda rid, who: kernel.run_now(job_id, request_id=rid, operator=who, force=force)


def approve(kernel: Kernel, occurrence_id: int, reason: str | None = None) -> Action:
    """Let an occurrence awaiting approval run (it is queued)."""
    return lambda rid, who: kernel.approve(
        occurrence_id, request_id=rid, operator=who, reason=reason
    )


def reject(kernel: Kernel, occurrence_id: int, reason: str | None = None) -> Action:
    """Refuse an occurrence awaiting approval (it is skipped, reason ``approval_rejected``)."""
    return lambda rid, who: kernel.reject(
        occurrence_id, request_id=rid, operator=who, reason=reason
    )


def cancel_job(
    kernel: Kernel, job_id: str, cascade: bool, request_id: str, operator: str
) -> dict[str, Any]:
    """Disable a job and cancel its work (``cascade``: also of the jobs chained after it)."""
    rid = _IDENT(request_id, "request_id")
    who = _IDENT(operator, "operator")
    try:
        done = kernel.cancel_job(job_id, cascade=cascade, request_id=rid, operator=who)
    except KernelError as exc:
        exc.details.setdefault("request_id", rid)
        raise
    return {
        "request_id": done.request_id,
        "deduplicated": done.deduplicated,
        "operator": who,
        "job_id": job_id,
        "cascade": cascade,
        "jobs": list(done.jobs),
        "disabled": list(done.disabled),
        "cancelled": list(done.cancelled),
        "stopping": list(done.stopping),
    }
