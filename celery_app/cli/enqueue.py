"""``kernel enqueue TASK``: run a registered task through the kernel (issue 27)."""

from __future__ import annotations

from datetime import datetime

import click

from celery_app import operations
from celery_app.cli.output import Env, Instant, command, fields

__all__ = ["enqueue"]


@command("enqueue")
@click.argument("task")
@click.option("--args", "args_json", metavar="JSON", help="Positional arguments: a JSON array.")
@click.option("--kwargs", "kwargs_json", metavar="JSON", help="Keyword arguments: a JSON object.")
@click.option(
    "--key",
    metavar="KEY",
    help="Idempotency key (at most 200 characters): the same key of the same task is the "
    "same occurrence, answered deduplicated.",
)
@click.option("--queue", metavar="QUEUE", help="Queue of its run (default: the task's).")
@click.option(
    "--delivery",
    type=click.Choice(["at-least-once", "at-most-once"]),
    default="at-least-once",
    show_default=True,
)
@click.option(
    "--countdown", type=click.FloatRange(min=0), metavar="S", help="Claimable in S seconds."
)
@click.option("--eta", type=Instant(), help="Claimable from TIME (ISO 8601; UTC without offset).")
@click.option(
    "--priority", type=click.IntRange(0, 255), help="0-255: higher runs are hinted first."
)
@click.option(
    "--expires",
    type=click.FloatRange(min=0),
    metavar="S",
    help="Not started within S seconds, the run is skipped (expired), never run late.",
)
def enqueue(
    env: Env,
    task: str,
    args_json: str | None,
    kwargs_json: str | None,
    key: str | None,
    queue: str | None,
    delivery: str,
    countdown: float | None,
    eta: datetime | None,
    priority: int | None,
    expires: float | None,
) -> None:
    """Enqueue a run of TASK: a durable occurrence of its job task:TASK, then its hint."""
    if countdown is not None and eta is not None:
        raise click.UsageError("give --countdown or --eta, not both")
    data = operations.enqueue_task(
        env.kernel,
        env.app,
        task,
        args=operations.json_argument(args_json, "--args", list),
        kwargs=operations.json_argument(kwargs_json, "--kwargs", dict),
        key=key,
        queue=queue,
        delivery=delivery,
        countdown=countdown,
        eta=eta,
        priority=priority,
        expires=expires,
    )

    def render() -> str:
        occ = data["occurrence"]
        same = " (deduplicated: this key's occurrence exists)" if data["deduplicated"] else ""
        return fields(
            [
                ("occurrence", f"{occ['id']}{same}"),
                ("job", occ["job_id"]),
                ("status", occ["status"]),
                ("trigger key", occ["trigger_key"]),
                ("scheduled for", occ["scheduled_for"]),
                *([("expires at", occ["expires_at"])] if occ.get("expires_at") else []),
            ]
        )

    env.emit(data, render)
