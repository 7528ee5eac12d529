"""``kernel budgets list``: each run budget's limits and what its latest window used."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from celery_app.cli.output import Env, command, table
from celery_app.operations import format_age

__all__ = ["budgets"]

budgets = click.Group("budgets", help="Run budgets: shared ones from job files, and per job.")


def _start(ms: int | None) -> str:
    return "-" if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat()


@command("list", budgets)
def _list(env: Env) -> None:
    """Shared budgets (a job file's budgets:) and per-job ones (job:ID) with their usage."""
    listed = env.kernel.list_budgets()

    def render() -> str:
        return table(
            ("budget", "window", "max runs", "max units", "window start (UTC)", "runs", "units"),
            (
                (
                    b["name"],
                    format_age(b["window"]) if b["window"] is not None else "(job's own)",
                    b["max_runs"] if b["shared"] else "-",
                    b["max_units"] if b["shared"] else "-",
                    _start(b["window_start"]),
                    b["runs"],
                    b["units"],
                )
                for b in listed
            ),
            empty="(no budgets)",
        )

    env.emit({"budgets": listed}, render)
