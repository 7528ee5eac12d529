"""The event log and one occurrence's story: event pages, run output, runtime controls,
pruning settled history."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from celery_app.operations.times import iso
from celery_app.settings import KernelSettings
from kernel import EventCursor, EventType, Kernel, redacted_spec

__all__ = [
    "events",
    "occurrence_events",
    "runtime_controls",
    "occurrence_detail",
    "output_chunks",
    "prune",
]


_EVENT_PAGE = 1000


def events(
    kernel: Kernel,
    after_id: int,
    job_id: str | None,
    occurrence_id: int | None,
    limit: int,
    before_id: int | None = None,
    *,
    types: Sequence[str] | None = None,
    since: datetime | None = None,
    cursor: EventCursor | None = None,
) -> dict[str, Any]:
    """One page of the event log, oldest first, and whether more lie beyond it.

    After ``after_id`` (or from ``cursor``) by default, read by commit like a follower,
    with the ``cursor`` that reads the next page (late commits included); with
    ``before_id`` the page ends just before it (paging back). ``more`` says whether the
    direction paged has more events. Only events of ``types`` and at or after ``since``,
    when given.
    """
    scope: dict[str, Any] = {
        "job_id": job_id,
        "occurrence_id": occurrence_id,
        "types": types,
        "since": since,
    }
    start = cursor or EventCursor(after_id)
    if before_id is None:
        found, end = kernel.follow_events(start, limit=limit, **scope)
        more = bool(found) and bool(kernel.follow_events(end, limit=1, **scope)[0])
        page = {"cursor": end.token}
    else:
        found = kernel.events(after_id=after_id, before_id=before_id, limit=limit, **scope)
        first = found[0].id if found else before_id
        more = bool(found) and bool(
            kernel.events(after_id=after_id, before_id=first, limit=1, **scope)
        )
        page = {}
    return {
        "events": [event.to_dict() for event in found],
        "first_id": found[0].id if found else None,
        "last_id": found[-1].id if found else start.after_id,
        "more": more,
        **page,
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
