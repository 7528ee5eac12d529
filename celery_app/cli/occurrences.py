"""``kernel occurrences list|show|logs``: what fired, how it went, what it holds now."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import click

from celery_app import operations
from celery_app.cli.output import Env, _printable, command, fields, interrupt_at_wait, table
from celery_app.operations import format_json, occurrence_events, output_chunks
from kernel import ACTIVE, ControlState, Kernel, Occurrence, OccurrenceStatus

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
_EVENT_PAGE = 1000


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
    excerpt_limit = data["output_excerpt_limit"]

    def render() -> str:
        control = d["control"]
        summary = fields(
            [
                ("id", d["id"]),
                ("job", f"{d['job_id']} (revision {d['job_revision']})"),
                ("status", occurrence_state(d)),
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
                ("last error", _error_line(d["last_error"])),
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
        excerpt = _printable(data["output_excerpt"]) or "(none)"
        return (
            f"{summary}\n{traceback_block(d)}"
            f"definition:\n{format_json(d['definition'], indent=2)}\n"
            f"output (last {excerpt_limit} bytes; all of it: occurrences logs {d['id']}):\n"
            f"{excerpt.rstrip()}\nevents:\n{timeline}"
        )

    env.emit(data, render)


def traceback_block(d: dict[str, Any]) -> str:
    """The traceback kept with the occurrence's last error, under a heading; else nothing."""
    trace = (d["last_error"] or {}).get("traceback")
    return f"traceback:\n{_printable(trace).rstrip()}\n" if trace else ""


def _error_line(error: dict[str, Any] | None) -> str | None:
    """``CODE: message`` (its traceback is printed on its own, below the fields)."""
    return f"{error['code']}: {error.get('message', '')}" if error else None


@command("logs", occurrences)
@click.argument("occurrence_id", metavar="OCC", type=int)
@click.option("--fence", type=int, default=None, help="Only the run under this fence.")
@click.option(
    "--follow", "-f", is_flag=True, help="Keep printing new output until the occurrence settles."
)
@click.option(
    "--interval",
    type=click.FloatRange(0.05, 60),
    default=1.0,
    show_default=True,
    help="Seconds between polls with --follow.",
)
def _logs(env: Env, occurrence_id: int, fence: int | None, follow: bool, interval: float) -> None:
    """A run's captured output (shell stdout/stderr, ctx.logger lines), oldest first.

    With --json: {"occurrence_id", "output": [{"event_id", "at", "fence", "stream",
    "text"}]}; with --follow, one such chunk object per line.
    """
    kernel = env.kernel
    kernel.get_occurrence(occurrence_id)  # NOT_FOUND before anything is printed
    if not follow:
        chunks = [
            c
            for c in output_chunks(occurrence_events(kernel, occurrence_id))
            if fence is None or c["fence"] == fence
        ]
        env.emit(
            {"occurrence_id": occurrence_id, "output": chunks},
            lambda: "".join(_printable(c["text"]) for c in chunks).rstrip("\n") or "(no output)",
        )
        return
    try:
        for chunk in _follow(kernel, occurrence_id, interval):
            if fence is not None and chunk["fence"] != fence:
                continue
            if env.json:
                click.echo(format_json(chunk))
            else:
                click.echo(_printable(chunk["text"]), nl=False)
    except KeyboardInterrupt:
        return


def _follow(kernel: Kernel, occurrence_id: int, interval: float) -> Iterator[dict[str, Any]]:
    """Output chunks as they are stored; ends once the occurrence settled and all is read."""
    cursor = None
    with interrupt_at_wait() as wait:
        while True:
            settled = kernel.get_occurrence(occurrence_id).status not in ACTIVE
            page, cursor = kernel.follow_events(
                cursor, occurrence_id=occurrence_id, limit=_EVENT_PAGE
            )
            yield from output_chunks([e.to_dict() for e in page])
            if len(page) < _EVENT_PAGE:
                if settled:
                    return
                wait(interval)
