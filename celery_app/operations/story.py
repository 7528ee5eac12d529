"""One occurrence's story, told from its events (``kernel why OCCURRENCE`` and the
console's run timeline).

Who created it and for which firing, how it was admitted (queued, skipped, awaiting
approval), each claim (by whom, which attempt, how long it waited), pauses and resumes,
failures and retries, hand-backs, operator actions and how it settled: one step per
event, with its time and the time since the previous step (seconds).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from celery_app.operations.history import occurrence_events
from celery_app.operations.times import format_age, iso
from kernel import Kernel

__all__ = ["SKIPPED_BECAUSE", "occurrence_story"]

#: What a skip reason means to a person (admission's, the gates' and catch-up's).
SKIPPED_BECAUSE = {
    "overlap": "the job's overlap policy is skip and another of its occurrences was active",
    "queue_full": "max_queued occurrences of the job were already waiting (its backlog bound)",
    "budget": "its budget ({budget}) had no runs or units left in the window",
    "approval_rejected": "an operator rejected it while it awaited approval",
    "approval_timeout": "nobody approved it within approval.timeout; the auto action rejected it",
    "approval_backlog": "approval.max_pending occurrences of the job already awaited approval",
    "catchup_latest": "Beat was down; catch-up latest runs only the most recent missed firing",
    "catchup_none": "Beat was down; catch-up none runs no missed firing",
    "outside_catchup_window": "Beat was down; the firing was older than the catch-up window",
    "fan_in_timeout": "not every parent of the fan-in succeeded within after.within",
    "fan_in_parent_failed": "a parent of the fan-in did not succeed for this firing",
    "expired": "no worker started it before its start deadline (expires); it never runs late",
}


def _source(data: dict[str, Any]) -> str:
    """Who created the occurrence, from its trigger key."""
    key = str(data.get("trigger_key", ""))
    kind, _, rest = key.partition(":")
    if kind == "manual":
        return f"created by run-now (request {rest})"
    if kind == "chain":
        return f"created by its chain, after occurrence {rest}"
    if kind == "fan_in":
        return f"created by its fan-in, for the parents' firing at {rest}"
    if kind in ("cron", "every", "at", "in"):
        return f"created by Beat for the {kind} firing at {rest}"
    if kind in ("key", "enqueue"):  # kernel/jobs/enqueueing.py
        return f"enqueued with key {rest!r}" if kind == "key" else "enqueued (no key)"
    return f"created ({key})"


def _created(data: dict[str, Any], story: list[dict[str, Any]]) -> str:
    admitted = "awaits approval" if data.get("awaiting_approval") else "queued"
    params = f"; run parameters {data['params']}" if data.get("params") is not None else ""
    return f"{_source(data)}; admitted: {admitted}{params}"


def _claimed(data: dict[str, Any], story: list[dict[str, Any]]) -> str:
    text = f"claimed by {data.get('owner')} (attempt {data.get('attempt')})"
    if data.get("resumed"):
        text += ", resuming from its checkpoint"
    if data.get("previous_owner"):
        text += f"; the lease of {data['previous_owner']} had expired"
    return text


def _retry(data: dict[str, Any], story: list[dict[str, Any]]) -> str:
    error = data.get("error") or {}
    text = f"attempt {data.get('attempt')} failed: {error.get('code')} {error.get('message', '')}"
    retry_at = data.get("retry_at")
    if isinstance(retry_at, int):
        at = datetime.fromtimestamp(retry_at / 1000, UTC)
        text = text.rstrip() + f"; retry at {iso(at)}"
    return text


def _settled(verb: str) -> Callable[[dict[str, Any], list[dict[str, Any]]], str]:
    def describe(data: dict[str, Any], story: list[dict[str, Any]]) -> str:
        claims = [s for s in story if s["type"] == "occurrence_claimed"]
        error = data.get("error") or {}
        why = f": {error.get('code')} {error.get('message', '')}".rstrip() if error else ""
        if not claims:  # settled before any run (a cancel while queued)
            return f"{verb}{why}"
        return f"{verb}{why}, {format_age(story[-1]['at_s'] - claims[-1]['at_s'])} after its claim"

    return describe


def _by(verb: str) -> Callable[[dict[str, Any], list[dict[str, Any]]], str]:
    def describe(data: dict[str, Any], story: list[dict[str, Any]]) -> str:
        who = data.get("operator")
        return f"{verb} by {who}" if who else verb

    return describe


_TELLERS: dict[str, Callable[[dict[str, Any], list[dict[str, Any]]], str]] = {
    "occurrence_created": _created,
    "job_run_now": _by("run-now asked"),
    "occurrence_claimed": _claimed,
    "occurrence_pause_requested": _by("pause requested"),
    "occurrence_paused": lambda d, s: (
        f"paused at safe point {d.get('safe_point')}, checkpoint "
        "stored; not claimable until resumed"
    ),
    "occurrence_resumed": _by("resumed"),
    "occurrence_handed_back": lambda d, s: "handed back at a safe point (warm shutdown)",
    "occurrence_retry_wait": _retry,
    "occurrence_succeeded": _settled("succeeded"),
    "occurrence_dead_letter": _settled("dead letter"),
    "occurrence_cancelled": _settled("cancelled"),
    "occurrence_needs_adjudication": _settled("needs adjudication (outcome unknown)"),
    "occurrence_cancel_requested": _by("cancel requested"),
    "occurrence_requeued": _by("requeued"),
    "occurrence_adjudicated": lambda d, s: (
        f"adjudicated {d.get('decision')} by {d.get('operator') or d.get('authority')}"
    ),
    "occurrence_approved": _by("approved"),
    "occurrence_rejected": _by("rejected"),
    "occurrence_skipped": lambda d, s: _skipped(d),
}


def _skipped(data: dict[str, Any]) -> str:
    reason = str(data.get("reason") or "skipped")
    meaning = SKIPPED_BECAUSE.get(reason)
    said = f" ({meaning.format(budget=data.get('budget'))})" if meaning else ""
    if reason == "expired":  # settled after it was created, not at its admission
        return f"skipped: expired at {data.get('expires_at')}{said}"
    return f"{_source(data)}; not admitted, skipped: {reason}{said}"


def occurrence_story(kernel: Kernel, occurrence_id: int) -> dict[str, Any]:
    """The shape ``why OCCURRENCE --json`` prints: the occurrence and its story.

    Raises:
        NotFound: no such occurrence.
    """
    occurrence = kernel.get_occurrence(occurrence_id).to_dict()
    story: list[dict[str, Any]] = []
    for event in occurrence_events(kernel, occurrence_id):
        at = datetime.fromisoformat(event["at"].replace("Z", "+00:00"))
        step = {
            "event_id": event["id"],
            "at": event["at"],
            "at_s": at.timestamp(),
            "type": event["type"],
            "fence": event["fence"],
            "since_previous_s": at.timestamp() - story[-1]["at_s"] if story else 0.0,
        }
        teller = _TELLERS.get(event["type"])
        step["text"] = teller(event["data"], [*story, step]) if teller else event["type"]
        story.append(step)
    for step in story:
        del step["at_s"]
    first, last = (story[0]["at"], story[-1]["at"]) if story else (None, None)
    blocker = kernel.blocker(occurrence_id)
    return {
        "occurrence": occurrence,
        "job_id": occurrence["job_id"],
        "status": occurrence["status"],
        # Why it waits, when it waits (None: running or settled; kind "none": claimable).
        "blocker": None if blocker is None else blocker.to_dict(),
        # Its place in a Celery canvas (chain, link, chord), None outside one.
        "canvas": kernel.canvas(occurrence_id),
        "story": story,
        "first_at": first,
        "last_at": last,
    }
