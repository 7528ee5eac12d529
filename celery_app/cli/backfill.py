"""``kernel jobs backfill JOB --from T1 --to T2``: occurrences for a job's past firings."""

from __future__ import annotations

from datetime import datetime

import click

from celery_app import operations
from celery_app.cli.actions import default_operator
from celery_app.cli.jobs import jobs
from celery_app.cli.output import Env, Instant, command, fields, table

__all__ = ["backfill"]


@command("backfill", jobs)
@click.argument("job_id", metavar="JOB")
@click.option("--from", "start", type=Instant(), required=True, help="First instant of the range.")
@click.option("--to", "end", type=Instant(), required=True, help="Last instant of the range.")
@click.option(
    "--params",
    metavar="JSON",
    default=None,
    help="Each new occurrence's arguments as a JSON object: args, kwargs (an http job's "
    "json or body), merged into its payload (JSON Merge Patch).",
)
@click.option(
    "--max",
    "max_firings",
    type=click.IntRange(1, 100_000),
    default=None,
    metavar="N",
    help=f"Make at most the first N firings (needed past {operations.MAX_BACKFILL}).",
)
@click.option("--dry-run", is_flag=True, help="List the firings and which exist; write nothing.")
@click.option(
    "--sequential",
    is_flag=True,
    help="Queue them all, run one at a time in firing order (no overlap/max_queued check).",
)
@click.option("--operator", default=None, help="Who asks (default: the OS user).")
def backfill(
    env: Env,
    job_id: str,
    start: datetime,
    end: datetime,
    params: str | None,
    max_firings: int | None,
    dry_run: bool,
    sequential: bool,
    operator: str | None,
) -> None:
    """Make one occurrence per firing of JOB's schedule between --from and --to.

    Trigger keys are the schedule's own, so a firing that exists already (made by Beat
    or an earlier backfill) is not made again: running the same backfill twice creates
    nothing the second time. New ones are admitted by the job's overlap policy and
    max_queued (a refused firing is recorded skipped, with its reason), unless
    --sequential. Refused without --max when the range holds more than 10,000 firings.
    """
    data = operations.backfill(
        env.kernel,
        job_id,
        start,
        end,
        params=operations.parse_params(params),
        max_firings=max_firings,
        dry_run=dry_run,
        sequential=sequential,
        operator=operator or default_operator(),
    )

    def render() -> str:
        head = fields(
            [
                ("job", f"{data['job_id']} (revision {data['revision']})"),
                ("range", f"{data['from']} .. {data['to']}"),
                (
                    "firings",
                    f"{data['planned']}" + (" (first of more)" if data["truncated"] else ""),
                ),
            ]
        )
        if dry_run:
            rows = table(
                ("trigger key", "due (UTC)", "existing occurrence"),
                ((f["trigger_key"], f["due"], f["existing"] or "-") for f in data["firings"]),
                empty="(no firings in the range)",
            )
            return f"{head}\n{rows}\n(dry run: nothing written)"
        counts = fields(
            [
                ("created", len(data["created"])),
                (
                    "skipped",
                    ", ".join(f"{s['trigger_key']} {s['reason']}" for s in data["skipped"]) or "-",
                ),
                ("existing", len(data["existing"])),
            ]
        )
        return f"{head}\n{counts}"

    env.emit(data, render)
