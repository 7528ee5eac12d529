"""``kernel why OCCURRENCE``: one occurrence's whole story (built by
:func:`celery_app.operations.occurrence_story`) as text, one line per event. Durations
are for people in the text (``3m05s``) and seconds under ``--json``.
"""

from __future__ import annotations

from typing import Any

from celery_app.cli.occurrences import OCCURRENCE_HEADERS, occurrence_dict_rows, traceback_block
from celery_app.cli.output import fields, table
from celery_app.operations import format_age

__all__ = ["canvas_fields", "render_story"]


def canvas_fields(canvas: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """The occurrence's place in its canvas as lines (none outside one)."""
    if canvas is None:
        return []
    parent, chord = canvas["parent"], canvas["chord"]
    role = canvas["role"]
    if chord is not None and role == "chord member" and chord["member_index"] is None:
        # A chain's first step or a replaced run: the run continuing it holds its place.
        role = f"member of chord {chord['id']} ({chord['members']} members), its place handed on"
    elif chord is not None and role == "chord member":
        role = f"member {chord['member_index'] + 1} of {chord['members']} of chord {chord['id']}"
    elif chord is not None:
        role = f"body of chord {chord['id']} ({chord['members']} members)"
    if chord is not None:
        role += f", {chord['state']}"
    place = role if canvas["steps"] == 1 else f"{role}, step {canvas['step']} of {canvas['steps']}"
    made = None
    if parent is not None:
        made = (
            f"made by occurrence {parent['occurrence_id']} (task id {parent['task_id']}, "
            f"{parent['job_id']}, {parent['status']})"
        )
    return [
        ("canvas", place),
        ("parent", made),
        ("canvas waits for", canvas["waits_for"]),
    ]


def render_story(data: dict[str, Any]) -> str:
    """The story as text: the occurrence's row and what it waits for, then one line per
    step, then the last error's traceback when one was kept."""
    blocker = data["blocker"]
    return "\n".join(
        [
            fields(
                [
                    ("occurrence", data["occurrence"]["id"]),
                    ("job", data["job_id"]),
                    ("waiting for", None if blocker is None else blocker["text"]),
                    *canvas_fields(data["canvas"]),
                ]
            ),
            table(OCCURRENCE_HEADERS, occurrence_dict_rows([data["occurrence"]])),
            "",
            table(
                ("at", "after", "what happened"),
                (
                    (s["at"], "+" + format_age(s["since_previous_s"]), s["text"])
                    for s in data["story"]
                ),
                full_last=True,
            ),
            traceback_block(data["occurrence"]).rstrip(),
        ]
    ).rstrip()
