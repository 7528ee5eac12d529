"""``kernel why``: JOB --at TIME, what became of the firing nearest a time (the answer
of :func:`celery_app.operations.why_answer`; celery_app/operations/why.py lists its
outcomes); OCCURRENCE, that occurrence's whole story."""

from __future__ import annotations

from datetime import datetime

import click

from celery_app.cli.occurrences import OCCURRENCE_HEADERS, occurrence_dict_rows, traceback_block
from celery_app.cli.output import Env, Instant, command, fields, table
from celery_app.cli.settings_report import job_zone
from celery_app.cli.story import render_story
from celery_app.operations import occurrence_story, why_answer

__all__ = ["why"]


@command("why")
@click.argument("target", metavar="JOB|OCCURRENCE")
@click.option(
    "--at",
    "at",
    type=Instant(),
    default=None,
    help="With JOB: the time to ask about (ISO 8601, UTC when no offset is given; "
    "now; or relative to now: -5m, +1h).",
)
def why(env: Env, target: str, at: datetime | None) -> None:
    """Why: JOB --at TIME, what became of the job's firing nearest TIME (created,
    skipped, not due, disabled); OCCURRENCE (an id), that occurrence's whole story."""
    if at is None:
        if not target.isdigit():
            env.usage(f"{target!r}: give a JOB with --at TIME, or an OCCURRENCE id for its story")
        story = occurrence_story(env.kernel, int(target))
        env.emit(story, lambda: render_story(story))
        return
    job_id = target
    data = why_answer(env.kernel, job_id, at)
    firing = data["firing"]
    data["zone"] = zone = job_zone(env.app, job_id, env.kernel.get_job(job_id).spec)

    def render() -> str:
        parts = [
            fields(
                [
                    ("job", f"{data['job_id']} ({data['schedule']})"),
                    ("zone", f"{zone['name']} ({zone['from']})" if zone else None),
                    ("asked about", data["at"]),
                    (
                        "nearest firing",
                        f"{firing['at']} ({firing['trigger_key']})" if firing else None,
                    ),
                    ("outcome", data["outcome"]),
                    ("why", data["reason"]),
                ]
            )
        ]
        if data["occurrence"] is not None:
            parts.append(table(OCCURRENCE_HEADERS, occurrence_dict_rows([data["occurrence"]])))
            parts.append(
                table(
                    ("event", "at", "type", "fence", "data"),
                    ((e["id"], e["at"], e["type"], e["fence"], e["data"]) for e in data["events"]),
                )
            )
            parts.append(traceback_block(data["occurrence"]).rstrip())
        return "\n".join(part for part in parts if part)

    env.emit(data, render)
