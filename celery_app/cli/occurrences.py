"""``kernel occurrences list|show``: what fired, how it went, what it holds now."""

from __future__ import annotations

from typing import Any

import click

from celery_app import operations
from celery_app.cli.output import Env, command, fields, format_json, table
from kernel import ControlState, Occurrence, OccurrenceStatus

__all__ = [
    "occurrences",
    "occurrence_dict_rows",
    "occurrence_rows",
    "occurrence_state",
    "OCCURRENCE_HEADERS",
]

occurrences = click.Group("occurrences", help="Occurrences: one row per logical firing of a job.")

OCCURRENCE_HEADERS = (
    "id",
    "job",
    "status",
    "attempt",
    "fence",
    "trigger key",
    "scheduled (UTC)",
    "control",
    "error",
)


def occurrence_state(d: dict[str, Any]) -> str:
    """What a person calls the occurrence's state: ``paused`` when its control is paused."""
    paused = (d["control"] or {}).get("state") == ControlState.PAUSED
    return ControlState.PAUSED.value if paused else str(d["status"])


def occurrence_rows(found: list[Occurrence]) -> list[tuple[Any, ...]]:
    """Table rows under :data:`OCCURRENCE_HEADERS`, from ``to_dict()`` so both modes agree."""
    return occurrence_dict_rows([occ.to_dict() for occ in found])


def occurrence_dict_rows(found: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Table rows under :data:`OCCURRENCE_HEADERS` from occurrences' JSON shapes."""
    rows = []
    for d in found:
        error = d["last_error"]
        rows.append(
            (
                d["id"],
                d["job_id"],
                occurrence_state(d),
                f"{d['attempt']}/{d['max_attempts']}",
                d["fence"],
                d["trigger_key"],
                d["scheduled_for"],
                (d["control"] or {}).get("state"),
                f"{error['code']}: {error.get('message', '')}" if error else d["skip_reason"],
            )
        )
    return rows


@command("list", occurrences)
@click.option("--job", "job_id", default=None, metavar="JOB", help="Only this job's occurrences.")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice([*(s.value for s in OccurrenceStatus), ControlState.PAUSED.value]),
    help="Only these statuses (repeatable); paused: those paused at a checkpoint.",
)
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option(
    "--before",
    "before_id",
    type=int,
    default=None,
    metavar="ID",
    help="Page backwards: only ids below this one.",
)
def _list(
    env: Env, job_id: str | None, statuses: tuple[str, ...], limit: int, before_id: int | None
) -> None:
    """List occurrences, newest first."""
    found = env.kernel.list_occurrences(
        job_id=job_id, statuses=statuses or None, limit=limit, before_id=before_id
    )
    env.emit(
        [occ.to_dict() for occ in found],
        lambda: table(OCCURRENCE_HEADERS, occurrence_rows(found), empty="(no occurrences)"),
    )


@command("show", occurrences)
@click.argument("occurrence_id", metavar="OCC", type=int)
def _show(env: Env, occurrence_id: int) -> None:
    """Show one occurrence with its checkpoint, result and events."""
    d = data = operations.occurrence_detail(env.kernel, occurrence_id)
    events = data["events"]

    def render() -> str:
        control = d["control"]
        summary = fields(
            [
                ("id", d["id"]),
                ("job", f"{d['job_id']} (revision {d['job_revision']})"),
                (
                    "status",
                    d["status"]
                    if occurrence_state(d) == d["status"]
                    else f"{occurrence_state(d)} ({d['status']})",
                ),
                ("attempt", f"{d['attempt']}/{d['max_attempts']}"),
                ("fence", d["fence"]),
                ("trigger key", d["trigger_key"]),
                ("scheduled", d["scheduled_for"]),
                ("available", d["available_at"]),
                (
                    "lease",
                    f"{d['lease_owner']} until {d['lease_expires_at']}"
                    if d["lease_owner"]
                    else None,
                ),
                ("last error", d["last_error"]),
                ("skip reason", d["skip_reason"]),
                ("cancel requested", d["cancel_requested"]),
                (
                    "control",
                    f"{control['state']} (revision {control['revision']})" if control else None,
                ),
                ("created", d["created_at"]),
                ("settled", d["settled_at"]),
                ("checkpoint", d["checkpoint"]),
                ("result", d["result"]),
            ]
        )
        timeline = table(
            ("event", "at", "type", "fence", "data"),
            ((e["id"], e["at"], e["type"], e["fence"], e["data"]) for e in events),
        )
        return (
            f"{summary}\ndefinition:\n{format_json(d['definition'], indent=2)}\nevents:\n{timeline}"
        )

    env.emit(data, render)
