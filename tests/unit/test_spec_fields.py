"""The spec fields of issue 13 (budget, approval, delete_after_run, ttl, after.fanout), the
chain rules, and the quality of every refusal: our words, its path, all problems at once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from unit.test_jobspec import REFUSALS, refused_field, shell, spec

from beat_schedule.jobfiles import JobFileInvalid, validate_job_file
from kernel.errors import InvalidArgument
from kernel.spec.jobspec import validate_job_spec

ONE_SHOT = {"at": "2030-01-01T00:00:00Z"}


@pytest.mark.parametrize(
    ("fields", "normal"),
    [
        ({"budget": {"window": "1h", "max_runs": 10}},
         {"budget": {"window": 3600.0, "max_runs": 10, "max_units": None}}),
        ({"budget": {"max_units": 5, "max_runs": None}},
         {"budget": {"window": 86400.0, "max_runs": None, "max_units": 5}}),
        ({"budget": "nightly.batch"}, {"budget": "nightly.batch"}),
        ({"budget": None}, {}),
        ({"approval": {"required": True}},
         {"approval": {"required": True, "timeout": 3600.0, "auto": "reject", "max_pending": 10}}),
        ({"approval": {"timeout": "1h", "auto": "approve", "max_pending": 2}},
         {"approval": {"required": True, "timeout": 3600.0, "auto": "approve", "max_pending": 2}}),
        ({"approval": {"required": False, "timeout": "5m"}}, {}),
        ({"approval": None}, {}),
        ({"schedule": ONE_SHOT, "delete_after_run": True}, {"delete_after_run": True}),
        ({"delete_after_run": False}, {}),
        ({"ttl": "7d"}, {"ttl": 604800.0}),
        ({"ttl": None}, {}),
    ],
)  # fmt: skip
def test_new_fields_normalise_and_are_left_out_when_unset(
    fields: dict[str, Any], normal: dict[str, Any]
) -> None:
    written = validate_job_spec(spec(**fields)).to_dict()
    new = {k: written[k] for k in ("budget", "approval", "delete_after_run", "ttl") if k in written}
    assert new == normal
    assert validate_job_spec(written).to_dict() == written  # the normal form is a fixed point


def test_fanout_is_kept_only_when_not_the_default() -> None:
    assert "fanout" not in validate_job_spec(spec(after={"job": "p"})).to_dict()["after"]
    assert (
        "fanout" not in validate_job_spec(spec(after={"job": "p", "fanout": 25})).to_dict()["after"]
    )
    assert (
        validate_job_spec(spec(after={"job": "p", "fanout": 100})).to_dict()["after"]["fanout"]
        == 100
    )


NEW_REFUSALS: list[tuple[dict[str, Any], str, str]] = [
    ({"budget": {}}, "budget", "must set max_runs or max_units"),
    ({"budget": {"window": "1h", "max_runs": None, "max_units": None}}, "budget", "max_runs"),
    ({"budget": {"window": "30s", "max_runs": 1}}, "budget.window", "between 60s"),
    ({"budget": {"window": "32d", "max_runs": 1}}, "budget.window", "between 60s"),
    ({"budget": {"max_runs": 0}}, "budget.max_runs", "between 1 and"),
    ({"budget": {"max_units": 1.5}}, "budget.max_units", "must be an integer"),
    ({"budget": {"max_runs": 1, "limit": 2}}, "budget.limit", "unknown field"),
    ({"budget": 5}, "budget", "budget object or the name"),
    ({"budget": "bad name"}, "budget", "must match"),
    ({"approval": {"auto": "maybe"}}, "approval.auto", "must be one of approve, reject"),
    ({"approval": {"max_pending": 0}}, "approval.max_pending", "between 1 and 10000"),
    ({"approval": {"required": 1}}, "approval.required", "must be true or false"),
    ({"approval": {"timeout": 0}}, "approval.timeout", "must be positive"),
    ({"approval": True}, "approval", "must be an object"),
    ({"delete_after_run": True}, "delete_after_run", "one-shot"),
    ({"delete_after_run": True, "schedule": {"every": 60}}, "delete_after_run", "one-shot"),
    ({"delete_after_run": "yes"}, "delete_after_run", "must be true or false"),
    ({"ttl": 0}, "ttl", "must be positive"),
    ({"ttl": "soon"}, "ttl", "must be a duration"),
    ({"after": {"job": "p", "fanout": 0}}, "after.fanout", "between 1 and 1000"),
    ({"after": {"job": "p", "fanout": 1001}}, "after.fanout", "between 1 and 1000"),
    ({"after": {"job": "p"}, "schedule": {"every": 60}}, "schedule", "remove its schedule"),
    ({"schedule": {"cron": None}}, "schedule.cron", "must be a string"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "field", "says"), NEW_REFUSALS, ids=[f for _, f, _ in NEW_REFUSALS]
)
def test_new_refusals_name_their_field(fields: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        validate_job_spec(spec(**fields))
    assert caught.value.field == field
    assert says in caught.value.message


_FOREIGN = (
    "Input should",
    "Field required",
    "Extra inputs",
    "pydantic",
    "errors.pydantic.dev",
    "Value error",
)


@pytest.mark.parametrize(
    "fields",
    [f for f, _ in REFUSALS] + [f for f, _, _ in NEW_REFUSALS],
    ids=[f for _, f in REFUSALS] + [f for _, f, _ in NEW_REFUSALS],
)
def test_no_refusal_speaks_pydantic(fields: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument) as caught:
        validate_job_spec(spec(**fields))
    text = json.dumps(caught.value.to_dict())
    assert not any(word in text for word in _FOREIGN), text
    assert caught.value.message.startswith(f"{caught.value.field}: ")


def test_every_problem_is_reported_at_once() -> None:
    raw = spec(lease="soon", retry={"backoff": "x", "max": "1h"}, colour="blue", **shell(argv=[]))
    with pytest.raises(InvalidArgument) as caught:
        validate_job_spec(raw)
    listed = [e["field"] for e in caught.value.details["errors"]]
    assert caught.value.field == "colour"  # a misspelt key first: it explains the rest
    assert set(listed) == {"colour", "lease", "retry.backoff", "payload.argv"}
    for field in listed:
        assert f"{field}: " in caught.value.message
    assert "expected one of id, kind, payload" in caught.value.message


def test_unknown_payload_keys_name_the_fields_the_kind_has() -> None:
    with pytest.raises(InvalidArgument) as caught:
        validate_job_spec(spec(kind="http", payload={"url": "http://h/", "timeout": 5}))
    assert caught.value.field == "payload.timeout"
    assert caught.value.message == (
        "payload.timeout: unknown field; expected one of method, url, headers, "
        "secret_headers, json, body, lookup, follow_redirects"
    )


def test_a_job_file_names_every_problem_of_every_job(tmp_path: Path) -> None:
    jobs = [spec(id="a", lease="x", queue=""), spec(id="b"), spec(id="c", ttl=0)]
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps({"jobs": jobs}), encoding="utf-8")
    with pytest.raises(JobFileInvalid) as caught:
        validate_job_file(path)
    fields = [e["field"] for e in caught.value.details["errors"]]
    assert fields == ["jobs[0].queue", "jobs[0].lease", "jobs[2].ttl"]
    assert "2 invalid job(s), 3 problem(s), nothing applied" in caught.value.message
    assert "jobs[2] ('c'): ttl: must be positive" in caught.value.message


def test_a_spec_that_is_not_an_object_and_a_kindless_payload() -> None:
    assert refused_field([]) == "spec"
    with pytest.raises(InvalidArgument) as caught:
        validate_job_spec({"id": "x", "payload": {"argv": []}})
    assert caught.value.message == "kind: is required"
