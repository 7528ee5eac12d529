"""``kernel jobs schema``: the JSON Schema of a job file, for editors and CI linters."""

from __future__ import annotations

import json

from celery_app.cli.jobs import jobs
from celery_app.cli.output import Env, command
from kernel import job_file_schema

__all__ = ["schema"]


@command("schema", jobs)
def schema(env: Env) -> None:
    """Print the JSON Schema (draft 2020-12) of a job file.

    Save it and point an editor at it: ``"$schema"`` in a JSON file, or a
    ``# yaml-language-server: $schema=...`` comment at the top of a YAML file.
    The output is JSON with or without ``--json``.
    """
    document = job_file_schema()
    env.emit(document, lambda: json.dumps(document, indent=2, ensure_ascii=False))
