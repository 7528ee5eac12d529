"""``celery -A celery_app kernel ...``: the operator's command line (a ``celery.commands`` plug-in).

Every command prints aligned text for people and, with ``--json``, JSON for scripts;
a refusal prints its stable error code and exits non-zero. See :mod:`.output`.
"""

from __future__ import annotations

import click

from celery_app.cli import (
    actions,
    budgets,
    exporter,
    job_schema,  # noqa: F401 - registers `jobs schema`
    jobs,
    maintenance,
    observe,
    occurrences,
    pools,
    users,
    web,
    why,
)

__all__ = ["kernel"]


@click.group("kernel")
def kernel() -> None:
    """Operate celery-kernel: jobs, occurrences, operator actions, status, metrics."""


for _command in (
    jobs.jobs,
    occurrences.occurrences,
    actions.pause,
    actions.resume,
    actions.requeue,
    actions.adjudicate,
    actions.cancel,
    actions.approve,
    actions.reject,
    budgets.budgets,
    observe.status,
    observe.events,
    observe.doctor,
    why.why,
    maintenance.migrate,
    maintenance.prune,
    pools.pools,
    exporter.exporter,
    web.web,
    users.users,
):
    kernel.add_command(_command)
