"""Every error code the kernel defines, provoked through the public API.

Each refusal must carry its stable code and a message that names what it is about
(the occurrence, job, request, field or revision), so a person can act on it.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import psycopg
import pytest
from servers import libpq_url
from sqlalchemy.engine import make_url

from kernel import errors
from kernel.errors import (
    EvidenceConflict,
    FenceConflict,
    InvalidArgument,
    KernelError,
    LeaseLost,
    NotFound,
    PauseUnsupported,
    PermissionDenied,
    RevisionConflict,
    SchemaUnknown,
    StateConflict,
    StorageUnavailable,
)
from kernel.store import Kernel
from kernel.testing import ManualClock

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness

#: The codes this file provokes; checked against kernel/errors.py so a new code needs a test.
PROVOKED = {
    "INVALID_ARGUMENT",
    "NOT_FOUND",
    "LEASE_LOST",
    "FENCE_CONFLICT",
    "REVISION_CONFLICT",
    "STATE_CONFLICT",
    "PAUSE_UNSUPPORTED",
    "EVIDENCE_CONFLICT",
    "SCHEMA_UNKNOWN",
    "STORAGE_UNAVAILABLE",
    "PERMISSION_DENIED",
}


def check(error: KernelError, code: str, *names: str) -> None:
    assert error.code == code and str(error).startswith(f"{code}: ")
    assert error.to_dict()["code"] == code and error.to_dict()["message"] == error.message
    for name in names:
        assert name in error.message, f"{name!r} missing from {error.message!r}"


def test_every_defined_code_is_provoked_here() -> None:
    defined = {
        getattr(errors, name).code
        for name in errors.__all__
        if name not in ("KernelError", "CommitState")
    }
    assert defined == PROVOKED


def test_invalid_argument_names_the_field(k: Harness) -> None:
    with pytest.raises(InvalidArgument) as spec:
        k.kernel.define_job(
            {
                "id": "bad",
                "kind": "callable",
                "payload": {"callable": "a:b"},
                "retry": {"jitter": 2},
            }
        )
    check(spec.value, "INVALID_ARGUMENT", "retry.jitter")
    assert spec.value.field == "retry.jitter"
    [occ_id] = k.occurrences()
    with pytest.raises(InvalidArgument) as decision:
        k.kernel.adjudicate(occ_id, decision="maybe", request_id="adj", operator="ops")
    check(decision.value, "INVALID_ARGUMENT", "decision")
    with pytest.raises(InvalidArgument) as request_id:
        k.kernel.cancel(occ_id, request_id="", operator="ops")
    check(request_id.value, "INVALID_ARGUMENT", "request_id")
    assert k.kernel.list_jobs()[0].id == "job"


def test_not_found_names_the_job_or_occurrence(k: Harness) -> None:
    with pytest.raises(NotFound) as job:
        k.kernel.get_job("ghost-job")
    check(job.value, "NOT_FOUND", "'ghost-job'")
    with pytest.raises(NotFound) as occ:
        k.kernel.get_occurrence(987654)
    check(occ.value, "NOT_FOUND", "987654")
    with pytest.raises(NotFound) as settle:
        k.kernel.succeed(987654, owner="w1", fence=1)
    check(settle.value, "NOT_FOUND", "987654")
    with pytest.raises(NotFound) as action:
        k.kernel.cancel(987654, request_id="c", operator="ops")
    check(action.value, "NOT_FOUND", "987654")


def test_lease_lost_names_the_occurrence_owner_and_fence(k: Harness) -> None:
    claim = k.running(owner="worker-a")
    occ_id = claim.occurrence.id
    with pytest.raises(LeaseLost) as lost:
        k.kernel.renew(occ_id, owner="worker-b", fence=1, lease=30)
    check(lost.value, "LEASE_LOST", f"occurrence {occ_id}", "'worker-b'", "fence 1", "'worker-a'")
    assert lost.value.details["current_fence"] == 1


def test_fence_conflict_names_the_occurrence_and_both_fences(k: Harness) -> None:
    occ_id = k.running().occurrence.id
    with pytest.raises(FenceConflict) as stale:
        k.kernel.request_pause(
            occ_id, expected_fence=7, request_id="p", safe_points=["before_execute"], operator="ops"
        )
    check(stale.value, "FENCE_CONFLICT", f"occurrence {occ_id}", "fence 1", "7")


def test_revision_conflict_names_the_job_and_revisions(k: Harness) -> None:
    job = k.define("nightly")
    with pytest.raises(RevisionConflict) as stale:
        k.kernel.revise_job({**job.spec, "max_attempts": 4}, expected_revision=5)
    check(stale.value, "REVISION_CONFLICT", "'nightly'", "revision 1", "5")


def test_state_conflict_names_the_job_or_occurrence(k: Harness) -> None:
    job = k.define("nightly")
    with pytest.raises(StateConflict) as exists:
        k.kernel.define_job({**job.spec, "queue": "elsewhere"})
    check(exists.value, "STATE_CONFLICT", "'nightly'")
    [occ_id] = k.occurrences("nightly")
    with pytest.raises(StateConflict) as paused:
        k.kernel.resume(occ_id, request_id="r", operator="ops")
    check(paused.value, "STATE_CONFLICT", f"occurrence {occ_id}")


def test_pause_unsupported_names_the_occurrence_and_adapter(k: Harness) -> None:
    k.define("backup", kind="shell", payload={"argv": ["/usr/bin/backup"]})
    occ_id = k.running("backup").occurrence.id
    with pytest.raises(PauseUnsupported) as refused:
        k.kernel.request_pause(
            occ_id, expected_fence=1, request_id="p", safe_points=[], operator="ops"
        )
    check(refused.value, "PAUSE_UNSUPPORTED", f"occurrence {occ_id}", "'shell'")
    assert k.kernel.get_occurrence(occ_id).control is None


def test_evidence_conflict_names_the_request_id(k: Harness) -> None:
    [occ_id] = k.occurrences()
    k.kernel.cancel(occ_id, request_id="ticket-42", operator="ops")
    with pytest.raises(EvidenceConflict) as reused:
        k.kernel.run_now("job", request_id="ticket-42", operator="ops")
    check(reused.value, "EVIDENCE_CONFLICT", "'ticket-42'", "cancel")


def test_schema_unknown_tells_to_migrate(kernel_url: str) -> None:
    with pytest.raises(SchemaUnknown) as empty:
        Kernel.open(kernel_url, clock=ManualClock())
    check(empty.value, "SCHEMA_UNKNOWN", "kernel migrate")


def test_storage_unavailable_on_a_read_only_database(k: Harness) -> None:
    """SQLite opened ``mode=ro``; PostgreSQL with read-only transactions (a standby's answer)."""
    k.define("kept")
    if k.backend == "sqlite":
        url = "sqlite:///file:" + k.url.removeprefix("sqlite:///") + "?mode=ro&uri=true"
    else:
        url = k.url + "?options=-c%20default_transaction_read_only%3Don"
    read_only = Kernel.open(url, clock=k.clock)
    try:
        assert [j.id for j in read_only.list_jobs()] == ["kept"]
        with pytest.raises(StorageUnavailable) as refused:
            read_only.define_job({"id": "new", "kind": "callable", "payload": {"callable": "a:b"}})
        check(refused.value, "STORAGE_UNAVAILABLE", "read", "not committed")
        assert refused.value.commit_state == "not_committed"
    finally:
        read_only.close()
    assert [j.id for j in k.kernel.list_jobs()] == ["kept"]


@pytest.mark.postgres
def test_permission_denied_names_the_role_and_what_it_may_not_do(pg_database_url: str) -> None:
    """A login role granted only SELECT (SQLSTATE 42501 on its first write)."""
    owner = Kernel.open(pg_database_url, migrate_schema=True)
    role = f"reader_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(libpq_url(pg_database_url), autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    url = make_url(pg_database_url).set(username=role, password="pw")
    reader = Kernel.open(url.render_as_string(hide_password=False))
    try:
        with pytest.raises(PermissionDenied) as refused:
            reader.define_job({"id": "new", "kind": "callable", "payload": {"callable": "a:b"}})
        check(refused.value, "PERMISSION_DENIED", f"'{role}'", "permission denied for table jobs")
        assert refused.value.details["role"] == role
        assert "pw" not in str(refused.value.details["database"])
        assert reader.list_jobs() == []
    finally:
        reader.close()
        owner.close()
        with psycopg.connect(libpq_url(pg_database_url), autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")
