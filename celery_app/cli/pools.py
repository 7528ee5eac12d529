"""``kernel pools set|list``: resource pools, their limits and what runs and waits in them."""

from __future__ import annotations

import click

from celery_app import operations
from celery_app.cli.output import Env, command, table

__all__ = ["pools"]

pools = click.Group("pools", help="Resource pools: set a limit, list limits and counts.")


@command("set", pools)
@click.argument("name")
@click.option(
    "--limit", required=True, type=int, help="How many of the pool's occurrences may run at once."
)
def _set(env: Env, name: str, limit: int) -> None:
    """Define pool NAME or change its limit (runs past a lowered limit are not stopped)."""
    data = operations.pools_set(env.kernel, name, limit)
    pool = data["pool"]
    env.emit(
        data,
        lambda: (
            f"pool {pool['name']}: limit {pool['limit']} "
            + ("(set)" if data["changed"] else "(unchanged)")
            + f", {pool['running']} running, {pool['waiting']} waiting"
        ),
    )


@command("list", pools)
def _list(env: Env) -> None:
    """Every pool: its limit, how many of its occurrences run and wait.

    A pool jobs name but nothing defines has the default limit 1 (defined: no).
    """
    found = operations.pools_list(env.kernel)
    env.emit(
        found,
        lambda: table(
            ("pool", "limit", "running", "waiting", "defined"),
            (
                (p["name"], p["limit"], p["running"], p["waiting"], "yes" if p["defined"] else "no")
                for p in found
            ),
        ),
    )
