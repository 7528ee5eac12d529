"""``kernel jobs schema`` prints the job file's JSON Schema; a file using it validates."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
from cli.support import job

from kernel import Kernel
from kernel.spec.jobfile import job_file_schema


def test_jobs_schema_prints_the_schema(cli) -> None:
    text = cli("jobs", "schema")
    assert text.code == 0
    assert json.loads(text.out) == job_file_schema()
    assert cli("jobs", "schema", "--json").json() == job_file_schema()


def test_a_job_file_may_name_its_schema(cli, kernel: Kernel, tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    document = {"$schema": "./job-file.schema.json", "jobs": [job("a")]}
    path.write_text(json.dumps(document), encoding="utf-8")
    assert jsonschema.Draft202012Validator(job_file_schema()).is_valid(document)
    assert cli("jobs", "apply", str(path), "--json").code == 0
    assert [j.id for j in kernel.list_jobs()] == ["a"]
