"""``kernel why OCCURRENCE``: one occurrence's whole story (built by
:func:`celery_app.operations.occurrence_story`) as text, one line per event. Durations
are for people in the text (``3m05s``) and seconds under ``--json``.
"""

from __future__ import annotations

from typing import Any

from celery_app.cli.occurrences import OCCURRENCE_HEADERS, occurrence_dict_rows, traceback_block
from celery_app.cli.output import fields, table
from celery_app.operations import format_age

__all__ = ["render_story"]


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
