"""``kernel jobs schema`` prints the job file's JSON Schema; a file using it validates."""

from __future__ import annotations

import json

from kernel.spec.jobfile import job_file_schema


def test_jobs_schema_prints_the_schema(cli) -> None:
    text = cli("jobs", "schema")
    assert text.code == 0
    assert json.loads(text.out) == job_file_schema()
    assert cli("jobs", "schema", "--json").json() == job_file_schema()
