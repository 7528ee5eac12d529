"""What became of a job's firing nearest a time, from the durable record: the answer
``kernel why JOB --at TIME`` and ``GET /api/jobs/{job_id}/why`` give.

The answer's ``outcome`` is one of:

* ``created`` — an occurrence exists; its status says how it went;
* ``skipped`` — a skipped occurrence records why (overlap, queue full, catch-up policy,
  budget spent, approval rejected / timed out / too many awaiting);
* ``not_due`` — the firing is still ahead, or the job did not exist yet at that time;
* ``disabled`` — the job was disabled when the firing came due;
* ``pending`` — the firing is due but no Beat has materialised it yet (is Beat running?);
* ``not_created`` — Beat's cursor moved past the firing without creating it (the job was
  re-planned from a later time by an enable or a revision);
* ``no_schedule`` — the job fires only manually or after another job; the occurrence
  nearest the time is shown instead;
* ``ended`` — the time is past the schedule's ``end``: nothing fires after it.

A job retired by its schedule (``end`` passed, ``max_runs`` made) reads ``disabled`` with
that reason for the firings after its retirement.

The schedule evaluated is the job's current one; a revision made since may have moved
its firings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from beat_schedule.timing import Firing, firings_between, next_firing
from celery_app.operations.history import occurrence_events
from celery_app.operations.jobs import describe_schedule
from celery_app.operations.story import SKIPPED_BECAUSE
from celery_app.operations.times import format_age, iso, within_calendar
from kernel import CLAIMABLE, LIMITED_STATUSES, EventType, Job, Kernel, Occurrence, OccurrenceStatus

__all__ = ["nearest_firing", "why_answer"]

_PAGE = 1000
#: Pages of occurrences / events read at most (a bounded answer beats a hung CLI).
_MAX_PAGES = 200
#: How much earlier than its firing an occurrence may carry a creation time (clock skew).
_SKEW = timedelta(minutes=5)
_MAX_LOOKBACK = timedelta(days=800)
_TOGGLES = (EventType.JOB_ENABLED, EventType.JOB_DISABLED)
#: Why a job was disabled, from its job_disabled event's reason.
_DISABLED_BECAUSE = {
    "cancelled": "it was cancelled (kernel jobs cancel)",
    "one_shot_fired": "it is a one-shot job and had fired",
    "schedule_ended": "its schedule had passed its end (retired)",
    "max_runs_reached": "its schedule had made its max_runs runs (retired)",
    "watchdog_check_passed": "it is a watchdog whose check passed (self_destruct)",
    "watchdog_watch_over": "it is a watchdog whose watch_for was over (self_destruct)",
}


def nearest_firing(
    schedule: dict[str, Any] | None,
    dst: dict[str, str],
    at: datetime,
    *,
    anchor: datetime,
    job_id: str | None = None,
) -> Firing | None:
    """The firing of ``schedule`` closest to ``at`` (the earlier one on a tie); under
    jitter, by the time it came due."""
    after = next_firing(schedule, dst, at - timedelta(microseconds=1), anchor=anchor, job_id=job_id)
    before = None
    span = timedelta(minutes=1)
    # Widen the look-back window until it holds a firing: the cost follows the gap
    # between firings, not how far back the schedule goes.
    while before is None and span <= _MAX_LOOKBACK * 2:
        found = firings_between(
            schedule, dst, at - span, at, anchor=anchor, limit=100_000, job_id=job_id
        )
        before = found[-1] if found else None
        span *= 2
    candidates = [f for f in (before, after) if f is not None]
    return min(candidates, key=lambda f: (abs((f.at - at).total_seconds()), f.at), default=None)


@dataclass
class _History:
    """What the job's own events say about its life around one instant."""

    defined_at: datetime | None = None
    enabled: bool | None = None
    disabled_reason: str | None = None
    replanned: list[dict[str, Any]] = field(default_factory=list)
    #: The ``firings_missed`` event whose span holds the instant, if any.
    missed: dict[str, Any] | None = None
    #: The ``history_pruned`` event (its data and ``at``) that deleted the firing's run.
    pruned: dict[str, Any] | None = None
    truncated: bool = False


def _history(kernel: Kernel, job: Job, at: datetime, trigger_key: str) -> _History:
    """Scan the job's events: when it was defined, whether it was enabled at ``at``, and
    the enables and revisions after ``at`` (which re-plan Beat's cursor)."""
    history = _History()
    after = 0
    for _ in range(_MAX_PAGES):
        page = kernel.events(after_id=after, job_id=job.id, limit=_PAGE)
        for event in page:
            if event.type == EventType.JOB_DEFINED and history.defined_at is None:
                history.defined_at = event.at
            elif event.type in _TOGGLES and event.at <= at:
                history.enabled = event.type == EventType.JOB_ENABLED
                history.disabled_reason = event.data.get("reason")
            elif event.type in _TOGGLES and history.enabled is None:
                # The first toggle after `at` reveals the state before it.
                history.enabled = event.type == EventType.JOB_DISABLED
            if event.at > at and event.type in (EventType.JOB_ENABLED, EventType.JOB_REVISED):
                history.replanned.append({"type": event.type, "at": iso(event.at)})
            if event.type == EventType.FIRINGS_MISSED and _spans(event.data, at):
                history.missed = event.data
            if event.type == EventType.HISTORY_PRUNED and trigger_key in event.data.get(
                "trigger_keys", ()
            ):
                history.pruned = {**event.data, "at": iso(event.at)}
        if len(page) < _PAGE:
            break
        after = page[-1].id
    else:
        history.truncated = True
    if history.enabled is None:
        history.enabled = job.enabled
    return history


def _spans(missed: dict[str, Any], at: datetime) -> bool:
    """Whether a ``firings_missed`` event's span holds the instant ``at``."""
    first, until = missed.get("first_at"), missed.get("until_at")
    return (
        first is not None
        and datetime.fromisoformat(first) <= at
        and (until is None or at < datetime.fromisoformat(until))
    )


def _find(kernel: Kernel, job_id: str, trigger_key: str, not_before: datetime) -> Occurrence | None:
    """The occurrence of one firing, searched newest first back to its firing time."""
    before: int | None = None
    for _ in range(_MAX_PAGES):
        page = kernel.list_occurrences(job_id=job_id, limit=_PAGE, before_id=before)
        for occ in page:
            if occ.trigger_key == trigger_key:
                return occ
        if len(page) < _PAGE or page[-1].created_at < not_before - _SKEW:
            return None
        before = page[-1].id
    return None


def _nearest_occurrence(kernel: Kernel, job_id: str, at: datetime) -> Occurrence | None:
    """For a job without a schedule: the recent occurrence scheduled nearest ``at``."""
    page = kernel.list_occurrences(job_id=job_id, limit=_PAGE)
    return min(page, key=lambda o: abs((o.scheduled_for - at).total_seconds()), default=None)


def _skip_reason(job: Job, occ: Occurrence) -> str:
    reason = occ.skip_reason or "skipped"
    meaning = SKIPPED_BECAUSE.get(reason)
    if meaning is None:
        return reason
    budget = occ.definition.get("budget")
    name = budget if isinstance(budget, str) else f"job:{job.id}"
    return f"{reason} ({meaning.format(budget=name)})"


def _explain(
    kernel: Kernel, job: Job, firing: Firing, now: datetime
) -> tuple[str, str, Occurrence | None]:
    occ = _find(kernel, job.id, firing.trigger_key, firing.at)
    if occ is not None:
        if occ.status == OccurrenceStatus.SKIPPED:
            return "skipped", f"recorded as skipped: {_skip_reason(job, occ)}", occ
        if occ.status == OccurrenceStatus.AWAITING_APPROVAL:
            auto = {"approve": "approved", "reject": "rejected"}[occ.definition["approval"]["auto"]]
            return (
                "created",
                f"occurrence {occ.id} awaits approval (kernel approve|reject {occ.id}); at "
                f"{iso(occ.approval_due_at)} it is {auto} automatically",
                occ,
            )
        return (
            "created",
            f"occurrence {occ.id} was created; it is {occ.status.value}"
            + (_waiting_for(kernel, job, occ)),
            occ,
        )
    if firing.at > now:
        return (
            "not_due",
            f"the firing is still ahead (in {format_age((firing.at - now).total_seconds())})",
            None,
        )
    history = _history(kernel, job, firing.at, firing.trigger_key)
    if history.pruned is not None:
        pruned = history.pruned
        status = pruned["statuses"][0]
        limit = next(key for key, limited in LIMITED_STATUSES.items() if limited == status)
        return (
            "pruned",
            f"its occurrence ran and was deleted at {pruned['at']} by the job's history "
            f"limit (history.{limit}: only the newest {pruned['kept']} {status} runs are kept)",
            None,
        )
    if history.defined_at is not None and history.defined_at > firing.at:
        return (
            "not_due",
            f"the job was defined at {iso(history.defined_at)}, after this firing",
            None,
        )
    if not history.enabled:
        because = _DISABLED_BECAUSE.get(history.disabled_reason or "")
        return (
            "disabled",
            "the job was disabled when this firing came due" + (f": {because}" if because else ""),
            None,
        )
    if not job.planned or (job.next_fire_at is not None and job.next_fire_at <= firing.at):
        return "pending", "due, but no Beat has materialised it yet: is Beat running?", None
    if history.missed is not None:
        missed = history.missed
        return (
            "skipped",
            f"missed while Beat was down, one of {missed['count']} firings missed "
            f"({missed['reason']}); the oldest {missed['recorded']} are recorded as skipped "
            "occurrences, the rest only counted",
            None,
        )
    if history.replanned:
        last = history.replanned[-1]
        return (
            "not_created",
            (
                f"Beat's cursor passed this firing: the job was re-planned by "
                f"{last['type']} at {last['at']}"
            ),
            None,
        )
    note = " (job history truncated)" if history.truncated else ""
    return "not_created", f"Beat's cursor passed this firing without creating it{note}", None


def _waiting_for(kernel: Kernel, job: Job, occ: Occurrence) -> str:
    """What keeps a waiting occurrence from running: its pool full, its job disabled."""
    if occ.status not in CLAIMABLE:
        return ""
    pool = occ.definition.get("pool")
    full = [p for p in kernel.pools() if p.name == pool and p.running >= p.limit]
    if full:
        return f": pool {pool} full ({full[0].running} running, limit {full[0].limit})"
    if not job.enabled and not occ.trigger_key.startswith("manual:"):
        return ": the job is disabled (only run-now occurrences of a disabled job run)"
    return ""


def _ended(job: Job, end: str) -> str:
    """Why nothing fires after a schedule's ``end``."""
    state = "it was retired (disabled)" if not job.enabled else "it is retired at its last one"
    return f"the schedule ended at {end}: no firing after it, and {state}"


def why_answer(kernel: Kernel, job_id: str, at: datetime) -> dict[str, Any]:
    """What became of a job's firing nearest ``at``: the shape ``why --json`` prints."""
    job = kernel.get_job(job_id)
    now = kernel.now()
    schedule = job.spec["schedule"]
    with within_calendar("at", f"the firing nearest {iso(at)}"):
        firing = (
            nearest_firing(schedule, job.spec["dst"], at, anchor=job.defined_at, job_id=job.id)
            if schedule
            else None
        )
    end = (schedule or {}).get("end")
    if end is not None and at > datetime.fromisoformat(end):
        occ = None
        outcome, reason = "ended", _ended(job, end)
    elif firing is None:
        occ = _nearest_occurrence(kernel, job.id, at)
        outcome, reason = "no_schedule", f"the job has no schedule ({describe_schedule(job.spec)})"
    else:
        outcome, reason, occ = _explain(kernel, job, firing, now)
    return {
        "job_id": job.id,
        "at": iso(at),
        "schedule": describe_schedule(job.spec),
        "firing": {"at": iso(firing.at), "trigger_key": firing.trigger_key} if firing else None,
        "outcome": outcome,
        "reason": reason,
        "occurrence": occ.to_dict() if occ else None,
        "events": occurrence_events(kernel, occ.id) if occ is not None else [],
    }
