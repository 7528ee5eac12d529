"""The job file's JSON Schema (``kernel jobs schema``) agrees with the validator.

Every example job file and every spec the unit tests hold valid (and its normal form)
validates against the schema with the ``jsonschema`` package; a few invalid ones do not.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from unit.test_jobspec import EQUIVALENT, EXAMPLE, MINIMAL, _specs, http, shell, spec
from unit.test_spec_digests import REFUSED_SINCE, SPECS

from kernel.errors import InvalidArgument
from kernel.spec.jobfile import job_file_schema
from kernel.spec.jobspec import validate_job_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
VALIDATOR = jsonschema.Draft202012Validator(job_file_schema())

#: Specs whose fields are all plain JSON (no datetime/timedelta objects).
VALID: dict[str, dict[str, Any]] = {
    "minimal": MINIMAL,
    "spec-example": EXAMPLE,
    **{n: raw for n, raw in SPECS.items() if n != "timedelta" and n not in REFUSED_SINCE},
    **{f"equivalent-{i}-{side}": spec(**pair[side]) for i, pair in enumerate(EQUIVALENT)
       for side in (0, 1)},
    "new-fields": spec(
        schedule={"at": "2030-01-01T00:00:00Z"},
        budget={"window": "1h", "max_runs": 10, "max_units": None},
        approval={"required": True, "timeout": "1h", "auto": "approve", "max_pending": 3},
        delete_after_run=True,
        ttl="7d",
    ),
    "shared-budget": spec(budget="nightly-batch", approval={"required": False}),
    "fanout": spec(schedule=None, after={"job": "p", "fanout": 100}),
}  # fmt: skip


def errors(document: dict[str, Any]) -> list[str]:
    return [error.message for error in VALIDATOR.iter_errors(document)]


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    schema = job_file_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    job = schema["$defs"]["JobSpec"]["properties"]
    assert job["lease"]["description"] and job["retry"]["description"]
    assert set(schema["properties"]) == {"$schema", "jobs", "pools", "budgets"}


def _load(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".toml":
        return tomllib.loads(text)
    return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)


@pytest.mark.parametrize(
    "path",
    sorted(p for p in EXAMPLES.rglob("*") if p.suffix in (".json", ".toml", ".yaml", ".yml")),
    ids=lambda p: p.name,
)
def test_every_example_job_file_validates(path: Path) -> None:
    assert errors(_load(path)) == []


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_specs_and_their_normal_forms_validate(name: str) -> None:
    raw = VALID[name]
    normal = validate_job_spec(raw).to_dict()
    assert errors({"jobs": [raw, normal]}) == []


def test_pools_and_budgets_sections_validate() -> None:
    document = {
        "jobs": [spec(pool="db", budget="batch")],
        "pools": {"db": {"limit": 2}},
        "budgets": {"batch": {"window": "1d", "max_units": 500}},
    }
    assert errors(document) == []


@pytest.mark.parametrize(
    "document",
    [
        {},
        {"jobs": [], "extra": 1},
        {"jobs": [spec(colour="blue")]},
        {"jobs": [spec(id=...)]},
        {"jobs": [spec(lease="\uff16\uff10")]},
        {"jobs": [spec(lease=0)]},
        {"jobs": [spec(enabled=1)]},
        {"jobs": [spec(overlap="never")]},
        {"jobs": [spec(schedule={})]},
        {"jobs": [spec(schedule={"cron": "* * * * *", "every": 5})]},
        {"jobs": [spec(**shell(argv=[]))]},
        {"jobs": [spec(**http(url=5))]},
        {"jobs": [spec(kind="shell", payload={"task": "t"})]},
        {"jobs": [spec(budget={"window": "1h"})]},
        {"jobs": [spec(after={"job": "p", "fanout": 0})]},
        {"jobs": [], "pools": {"db": {"limit": 0}}},
    ],
    ids=repr,
)
def test_invalid_documents_do_not_validate(document: dict[str, Any]) -> None:
    assert errors(document)


@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(_specs())
def test_whatever_the_validator_accepts_the_schema_accepts(raw: dict[str, Any]) -> None:
    try:
        job = validate_job_spec(raw)
    except InvalidArgument:
        return
    assert errors({"jobs": [raw, job.to_dict()]}) == []
