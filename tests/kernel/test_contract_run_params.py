"""Run parameters (issue 29): merged into one occurrence's payload, validated as the
payload is, part of its idempotency key, recorded with it; nothing written on a refusal."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from kernel import EvidenceConflict, InvalidArgument
from kernel.db.schema import occurrences, operator_requests
from kernel.spec.run_params import merge_patch

from .conftest import Harness

PAYLOAD = {"callable": "jobs.sample:run", "args": [1], "kwargs": {"day": "mon", "size": 3}}


def _idempotency_key(k: Harness, occurrence_id: int) -> str:
    with k.kernel.engine.connect() as conn:
        query = sa.select(occurrences.c.idempotency_key).where(occurrences.c.id == occurrence_id)
        return str(conn.execute(query).scalar_one())


def test_params_reach_that_occurrence_only_and_are_recorded(k: Harness) -> None:
    k.define(payload=PAYLOAD)
    params = {"kwargs": {"day": "tue", "size": None}, "args": [2]}
    ran = k.kernel.run_now("job", request_id="r1", operator="ops", params=params)
    plain = k.kernel.run_now("job", request_id="r2", operator="ops")

    occ = k.kernel.get_occurrence(ran.occurrence.id)
    assert occ.payload == {"callable": "jobs.sample:run", "args": [2], "kwargs": {"day": "tue"}}
    assert k.kernel.get_occurrence(plain.occurrence.id).payload == PAYLOAD
    assert k.kernel.get_job("job").spec["payload"] == PAYLOAD
    created = k.kernel.events(occurrence_id=occ.id, limit=10)[0]
    assert created.type == "occurrence_created" and created.data["params"] == params
    assert _idempotency_key(k, occ.id).startswith("job|manual:r1|r1|p")
    assert "|p" not in _idempotency_key(k, plain.occurrence.id)


def test_a_replay_is_deduplicated_only_with_the_same_params(k: Harness) -> None:
    k.define(payload=PAYLOAD)
    first = k.kernel.run_now("job", request_id="r1", operator="ops", params={"args": [5]})
    again = k.kernel.run_now("job", request_id="r1", operator="ops", params={"args": [5]})
    assert again.deduplicated and again.occurrence.id == first.occurrence.id
    with pytest.raises(EvidenceConflict):
        k.kernel.run_now("job", request_id="r1", operator="ops", params={"args": [6]})
    assert len(k.kernel.list_occurrences(job_id="job")) == 1


def test_params_making_a_bad_payload_are_refused_and_nothing_is_written(k: Harness) -> None:
    k.define(payload=PAYLOAD)
    bad = [({"callable": 5}, "params.callable"), ({"kwargs": [1]}, "params.kwargs")]
    for params, field in [*bad, ({"kwargs": {"blob": "x" * 70_000}}, "params")]:
        with pytest.raises(InvalidArgument) as refused:
            k.kernel.run_now("job", request_id="bad", operator="ops", params=params)
        assert refused.value.field == field
    assert k.kernel.list_occurrences(job_id="job") == []
    with k.kernel.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(operator_requests)).scalar() == 0


def test_merge_patch_follows_rfc_7386() -> None:
    target = {"a": "b", "c": {"d": "e", "f": "g"}}
    assert merge_patch(target, {"a": "z", "c": {"f": None}}) == {"a": "z", "c": {"d": "e"}}
    assert merge_patch(target, {"c": [1]}) == {"a": "b", "c": [1]}
    assert target == {"a": "b", "c": {"d": "e", "f": "g"}}  # unchanged


HOOK = {"url": "https://example.com/hook"}
DEFINITIONS = [
    ("shell", {"argv": ["echo", "hi"]}, {"argv": ["sh", "-c", "id"]}, "params.argv"),
    ("shell", {"argv": ["echo", "hi"]}, {"secrets": {"X": "HTTP_AUTH"}}, "params.secrets"),
    ("shell", {"argv": ["echo", "hi"]}, {"env": {"A": "b"}}, "params.env"),
    ("shell", {"argv": ["echo", "hi"]}, {"cwd": "/"}, "params.cwd"),
    ("http", HOOK, {"url": "https://evil.test/"}, "params.url"),
    ("http", HOOK, {"secret_headers": {"A": "T"}}, "params.secret_headers"),
    ("http", HOOK, {"lookup": {"url": "https://evil.test/"}}, "params.lookup"),
    ("callable", PAYLOAD, {"callable": "os:system"}, "params.callable"),
    ("callable", PAYLOAD, {"kind": "shell"}, "params.kind"),
]  # fmt: skip


@pytest.mark.parametrize(("kind", "payload", "params", "field"), DEFINITIONS)
def test_params_are_arguments_never_what_runs_where_or_with_which_secrets(
    k: Harness, kind: str, payload: dict[str, object], params: dict[str, object], field: str
) -> None:
    job = k.define(kind=kind, payload=payload)
    due = datetime(2026, 1, 1, tzinfo=UTC)
    attempts = {
        "run-now": lambda: k.kernel.run_now("job", request_id="r", operator="admin", params=params),
        "backfill": lambda: k.kernel.backfill(
            "job",
            expected_revision=job.revision,
            firings=[("backfill:2026-01-01T00:00:00Z", due)],
            operator="admin",
            params=params,
        ),
    }
    for attempt in attempts.values():
        with pytest.raises(InvalidArgument) as refused:
            attempt()
        assert refused.value.field == field
        assert "is the job's definition, not a run parameter" in refused.value.message
        assert "change the job" in refused.value.message
    assert k.kernel.list_occurrences(job_id="job") == []


def test_an_http_jobs_body_is_a_run_parameter(k: Harness) -> None:
    k.define(kind="http", payload={"url": "https://example.com/hook", "json": {"a": 1}})
    ran = k.kernel.run_now("job", request_id="r", operator="ops", params={"json": {"b": 2}})
    payload = k.kernel.get_occurrence(ran.occurrence.id).payload
    assert payload["json"] == {"a": 1, "b": 2} and payload["url"] == "https://example.com/hook"
