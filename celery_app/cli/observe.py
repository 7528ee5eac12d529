"""``kernel status`` and ``kernel events``: how the kernel is doing and what it did.

``kernel doctor`` is in :mod:`celery_app.cli.doctor`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import click

from celery_app import operations
from celery_app.cli.output import Env, command, fields, interrupt_at_wait, line, table
from celery_app.operations import format_age, format_json
from celery_app.settings import KernelSettings
from kernel import (
    Event,
    EventCursor,
    InvalidArgument,
    Kernel,
    masked_url,
)

__all__ = ["events", "status"]

_PAGE = 1000


@command("status")
@click.option(
    "--fail-on-stale-beat",
    is_flag=True,
    help="Exit 3 when no Beat has ticked within 3x its interval (for health checks).",
)
def status(env: Env, fail_on_stale_beat: bool) -> None:
    """Counts per status, expiring leases, pauses, dead letters, and each Beat's last tick."""
    data = {
        "database": masked_url(KernelSettings.from_app(env.app).database_url),
        **operations.status(env.kernel, env.app),
    }
    counts = data["counts"]
    beats = data["beats"]
    # The same test as operations.beat_warning: other warnings (the watchdog's) follow it.
    beat_down = not beats or all(b["stale"] for b in beats)
    refused = data["refused_entries"]

    def render() -> str:
        parts = [
            f"kernel {data['database']} status at {data['now']}",
            table(("status", "count"), counts.items()),
            "",
            fields(
                [
                    ("paused", data["paused"]),
                    ("leases expiring within 10s", data["leases_expiring_10s"]),
                    ("dead letters", counts["dead_letter"]),
                    ("needs adjudication", counts["needs_adjudication"]),
                    ("awaiting approval", counts["awaiting_approval"]),
                    ("oldest claimable", _oldest(data)),
                ]
            ),
            "",
            table(
                ("beat", "host", "interval", "last tick (UTC)", "age", "state"),
                (
                    (
                        b["id"],
                        b["host"],
                        format_age(b["interval_s"]),
                        b["last_tick_at"],
                        format_age(b["age_s"]),
                        "STALE" if b["stale"] else "ok",
                    )
                    for b in beats
                ),
                empty="(no live Beat)",
            ),
        ]
        parts += [f"WARNING: {w}" for w in data["warnings"]]
        parts += [f"REFUSED: {r['reason']}" for r in refused]
        parts += [f"CHANGED: {c['detail']}" for c in data["changed_entries"]]
        return "\n".join(parts)

    env.emit(data, render)
    if fail_on_stale_beat and beat_down:
        raise SystemExit(3)


def _oldest(data: dict[str, Any]) -> str:
    """How long the oldest claimable occurrence has waited, and what for."""
    age_s, blocker = data["oldest_claimable_age_s"], data["oldest_claimable_blocker"]
    if age_s is None:
        return "-"
    what = blocker["text"] if blocker else "running by now"
    return f"waiting {format_age(age_s)} (occurrence {data['oldest_claimable_id']}: {what})"


def _stream(
    kernel: Kernel,
    cursor: EventCursor,
    job_id: str | None,
    occurrence_id: int | None,
    interval: float,
) -> Iterator[tuple[Event, EventCursor]]:
    """New events by commit, each with the cursor that resumes just past it."""
    with interrupt_at_wait() as wait:
        while True:
            page, end = kernel.follow_events(
                cursor, job_id=job_id, occurrence_id=occurrence_id, limit=_PAGE
            )
            for event in page:
                yield event, cursor.past(event.id, end)
            cursor = end
            if len(page) < _PAGE:
                wait(interval)


class _Cursor(click.ParamType):  # type: ignore[type-arg]
    """An event id, or (with --follow) a cursor a followed event printed."""

    name = "cursor"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, EventCursor):
            return value
        try:
            return EventCursor.parse(str(value))
        except InvalidArgument as exc:
            self.fail(exc.message, param, ctx)


@command("events")
@click.option("--job", "job_id", default=None, metavar="JOB", help="Only this job's events.")
@click.option(
    "--occurrence",
    "occurrence_id",
    type=int,
    default=None,
    metavar="OCC",
    help="Only this occurrence's events.",
)
@click.option(
    "--after",
    type=_Cursor(),
    default=None,
    metavar="ID",
    help="Only events after this id (default: 0; with --follow: the newest), or past the "
    "cursor a page or a followed event printed (--json), late commits included.",
)
@click.option(
    "--before",
    type=click.IntRange(min=1),
    default=None,
    metavar="ID",
    help="The newest events below this id: page towards older events.",
)
@click.option(
    "--limit",
    type=click.IntRange(1, 1000),
    default=100,
    show_default=True,
    help="At most this many (without --follow).",
)
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events until interrupted.")
@click.option(
    "--interval",
    type=click.FloatRange(0.05, 60),
    default=1.0,
    show_default=True,
    help="Seconds between polls with --follow.",
)
def events(
    env: Env,
    job_id: str | None,
    occurrence_id: int | None,
    after: EventCursor | None,
    before: int | None,
    limit: int,
    follow: bool,
    interval: float,
) -> None:
    """The event log, oldest first, a page at a time; --follow streams new events.

    A page says when more events exist and which --after or --before shows them; with
    --json it carries the ``cursor`` that --after takes to read on by commit.
    With --json, --follow prints one JSON object per line: the event and the
    ``cursor`` that resumes just past it (--after CURSOR). --follow reads by commit: an
    event whose transaction commits after a later id's is still printed, once.
    """
    kernel = env.kernel
    if follow and before is not None:
        raise click.UsageError("--before pages through the past; it cannot --follow")
    if not follow:
        _events_page(env, kernel, job_id, occurrence_id, after or EventCursor(), before, limit)
        return
    start = kernel.event_cursor() if after is None else after
    newest = kernel.last_event_id() if after is None else after.after_id
    # On stderr in both modes: it tells people (and scripts waiting for it) where the stream starts.
    click.echo(f"following events after id {newest} (Ctrl-C to stop)", err=True)
    for event, resume in _stream(kernel, start, job_id, occurrence_id, interval):
        d = event.to_dict()
        click.echo(
            format_json({**d, "cursor": resume.token})
            if env.json
            else line((d["id"], d["at"], d["type"], d["job_id"], d["occurrence_id"], d["data"]))
        )


def _events_page(
    env: Env,
    kernel: Kernel,
    job_id: str | None,
    occurrence_id: int | None,
    after: EventCursor,
    before: int | None,
    limit: int,
) -> None:
    """One page of events, and whether more lie beyond it in the direction paged."""
    if before is not None and after != EventCursor(after.after_id):
        raise click.UsageError("--before pages by id: give --after an event id, not a cursor")
    data = operations.events(
        kernel, after.after_id, job_id, occurrence_id, limit, before_id=before, cursor=after
    )
    if before is None:
        hint = f"more events after id {data['last_id']}: --after {data['cursor']}"
    else:
        first = data["first_id"] if data["first_id"] is not None else before
        hint = f"older events before id {first}: --before {first}"

    def render() -> str:
        rows = table(
            ("id", "at", "type", "job", "occurrence", "data"),
            (
                (e["id"], e["at"], e["type"], e["job_id"], e["occurrence_id"], e["data"])
                for e in data["events"]
            ),
            empty="(no events)",
        )
        return f"{rows}\n({hint})" if data["more"] else rows

    env.emit(data, render)
