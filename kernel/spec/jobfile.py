"""The JSON Schema (draft 2020-12) of a job file, for editors and linters.

:mod:`beat_schedule.jobfiles` reads job files; this describes the same document:
``jobs`` (each a :class:`~kernel.spec.jobspec.JobSpec`, its payload by kind), and the shared
``pools`` and ``budgets`` that jobs name. The models validate nothing at run time: the
schema is generated from the very models that do.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field
from pydantic.json_schema import models_json_schema

from kernel.spec.fields import integer
from kernel.spec.jobspec import JobSpec
from kernel.spec.payload_kinds import PAYLOAD_MODELS
from kernel.spec.sections import Budget, Name, Section

__all__ = ["SCHEMA_DIALECT", "JobFile", "Pool", "job_file_schema"]

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


class Pool(Section):
    """A concurrency pool: at most ``limit`` runs of its jobs at once."""

    limit: Annotated[int, integer(1, 100_000)] = Field(description="Runs at once, at least 1.")


class JobFile(Section):
    """A job file: the jobs, and the pools and budgets they share."""

    schema_uri: str | None = Field(
        default=None, alias="$schema", description="Where an editor finds this schema."
    )
    jobs: list[JobSpec] = Field(description="The job definitions (SPEC §7).")
    pools: dict[Name, Pool] = Field(default_factory=dict, description="Pools by name.")
    budgets: dict[Name, Budget] = Field(
        default_factory=dict, description="Budgets by name, for a job's budget: NAME."
    )


def job_file_schema() -> dict[str, Any]:
    """The job file's JSON Schema: a job's ``payload`` follows its ``kind``'s model."""
    models: list[type[BaseModel]] = [JobFile, *PAYLOAD_MODELS.values()]
    refs, schema = models_json_schema(
        [(model, "validation") for model in models], ref_template="#/$defs/{model}"
    )
    defs: dict[str, Any] = schema["$defs"]
    for definition in defs.values():
        # Docstrings speak of attributes (timeout_s); the fields' own descriptions stay.
        definition.pop("description", None)
    root = defs.pop(JobFile.__name__)
    job = defs[JobSpec.__name__]
    job["allOf"] = [
        {
            "if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]},
            "then": {"properties": {"payload": refs[(model, "validation")]}},
        }
        for kind, model in PAYLOAD_MODELS.items()
    ]
    return {
        "$schema": SCHEMA_DIALECT,
        **root,
        "title": "celery-kernel job file",
        "description": "Jobs for `celery -A APP kernel jobs apply FILE` (JSON, TOML or YAML).",
        "$defs": defs,
    }
