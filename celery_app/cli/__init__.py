"""``celery -A celery_app kernel ...``: the operator's command line (a ``celery.commands`` plug-in).

Every command prints aligned text for people and, with ``--json``, JSON for scripts;
a refusal prints its stable error code and exits non-zero. See :mod:`.output`.

Celery imports every installed plug-in whenever any ``celery`` command starts (a
worker of any app too), so this module imports no command: each is imported when it
is run or listed. Loading them all here cost every process ~12 MB (the web console's
FastAPI, the exporter's Prometheus client) and, through the app, the whole kernel.
"""

from __future__ import annotations

import importlib
from typing import cast

import click

__all__ = ["kernel"]

#: Each command's name, the module of ours defining it, and its attribute there
#: (``kernel --help`` lists them by name). Importing ``jobs`` also imports
#: ``job_schema`` and ``backfill``, which add ``jobs schema`` and ``jobs backfill``.
COMMANDS: dict[str, tuple[str, str]] = {
    "jobs": ("jobs", "jobs"),
    "occurrences": ("occurrences", "occurrences"),
    "pause": ("actions", "pause"),
    "resume": ("actions", "resume"),
    "requeue": ("actions", "requeue"),
    "adjudicate": ("actions", "adjudicate"),
    "cancel": ("actions", "cancel"),
    "enqueue": ("enqueue", "enqueue"),
    "approve": ("actions", "approve"),
    "reject": ("actions", "reject"),
    "budgets": ("budgets", "budgets"),
    "status": ("observe", "status"),
    "events": ("observe", "events"),
    "doctor": ("doctor", "doctor"),
    "why": ("why", "why"),
    "migrate": ("maintenance", "migrate"),
    "prune": ("maintenance", "prune"),
    "pools": ("pools", "pools"),
    "exporter": ("exporter", "exporter"),
    "web": ("web", "web"),
    "users": ("users", "users"),
}
_ALSO_IMPORTED = {"jobs": ("job_schema", "backfill")}


class _KernelGroup(click.Group):
    """A group whose commands are imported by name, when first asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module_name, attribute = COMMANDS[cmd_name]
        for extra in _ALSO_IMPORTED.get(cmd_name, ()):
            importlib.import_module(f"{__name__}.{extra}")
        module = importlib.import_module(f"{__name__}.{module_name}")
        return cast(click.Command, getattr(module, attribute))


@click.group("kernel", cls=_KernelGroup)
def kernel() -> None:
    """Operate celery-kernel: jobs, occurrences, operator actions, status, metrics."""
