"""``kernel migrate`` and ``kernel prune``: the schema and the history's size."""

from __future__ import annotations

import click

from celery_app import operations
from celery_app.cli.output import Env, command, fields
from celery_app.config import kernel_engine
from celery_app.settings import KernelSettings
from kernel import Kernel, parse_duration

__all__ = ["migrate", "prune"]


@command("migrate")
def migrate(env: Env) -> None:
    """Create or upgrade the kernel's schema in KERNEL_DATABASE_URL (safe to repeat)."""
    settings = KernelSettings.from_app(env.app)
    # Not Env.kernel: that refuses exactly the schema this command exists to fix.
    kernel = Kernel(kernel_engine(settings), check=False)
    try:
        before, after = kernel.migrate()
    finally:
        kernel.close()
    data = {"before": before, "after": after, "changed": before != after}
    env.emit(
        data,
        lambda: fields(
            [
                ("schema before", before or "(none)"),
                ("schema now", after),
                ("changed", before != after),
            ]
        ),
    )


@command("prune")
@click.option(
    "--older-than",
    required=True,
    metavar="DURATION",
    help="Delete settled history older than this (e.g. 30d, 12h).",
)
@click.option(
    "--limit",
    type=click.IntRange(1, 1_000_000),
    default=10_000,
    show_default=True,
    help="At most this many occurrences per run.",
)
def prune(env: Env, older_than: str, limit: int) -> None:
    """Delete old succeeded, cancelled and skipped occurrences with their events.

    Dead letters and occurrences waiting for adjudication are never pruned. Beats
    silent for longer than KERNEL_BEAT_RETENTION are removed from the registry.
    """
    seconds = parse_duration(older_than, "older_than")
    pruned = operations.prune(env.kernel, env.app, seconds, limit)
    env.emit(
        pruned,
        lambda: (
            f"pruned {pruned['occurrences']} occurrence(s) and {pruned['events']} event(s) "
            f"settled more than {older_than} ago; forgot {len(pruned['beats_forgotten'])} "
            f"Beat(s) silent for more than {pruned['beat_retention_s']:g}s"
        ),
    )
