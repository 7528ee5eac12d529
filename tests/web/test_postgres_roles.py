"""``docs/postgres-roles.sql`` against a real PostgreSQL: each role has what it needs, no more.

The console role runs every action exactly as the web server does (the same
:data:`~celery_app.web.actions.ACTIONS`); the viewer role reads every resource and
every write it tries is refused and changes nothing; neither may change the schema.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psycopg
import pytest
import sqlalchemy as sa
from servers import libpq_url
from sqlalchemy.engine import make_url
from web.support import make_users, start_web, stop

from celery_app import app as celery
from celery_app import operations
from celery_app.web.actions import ACTIONS
from celery_app.web.users import Role, User
from kernel import Kernel, PermissionDenied
from kernel.testing import ManualClock

pytestmark = pytest.mark.postgres

ROLES_SQL = Path(__file__).resolve().parents[2] / "docs" / "postgres-roles.sql"


def _as(url: str, role: str) -> str:
    return make_url(url).set(username=role, password="change-me").render_as_string(False)


@pytest.fixture
def owner(pg_database_url: str) -> Iterator[Kernel]:
    kernel = Kernel.open(pg_database_url, migrate_schema=True)
    with psycopg.connect(libpq_url(pg_database_url), autocommit=True) as conn:
        conn.execute(ROLES_SQL.read_text())
    try:
        yield kernel
    finally:
        kernel.close()
        with psycopg.connect(libpq_url(pg_database_url), autocommit=True) as conn:
            for role in ("kernel_console", "kernel_viewer"):
                conn.execute(f"DROP OWNED BY {role}")
                conn.execute(f"DROP ROLE {role}")


def _job(kernel: Kernel, **fields: object) -> str:
    job_id = f"j{uuid.uuid4().hex[:8]}"
    kernel.define_job(
        {
            "id": job_id,
            "kind": "callable",
            "payload": {"callable": "os.path:join", "args": ["a"]},
            "schedule": {"every": "1h"},
            **fields,
        }
    )
    return job_id


def _run(kernel: Kernel, job: str) -> int:
    return kernel.run_now(job, request_id=uuid.uuid4().hex, operator="t", force=True).occurrence.id


def _act(kernel: Kernel, name: str, target: object, **params: object) -> dict[str, object]:
    action = ACTIONS[name]
    admin = User("console-admin", Role.ADMIN, "k")
    return action.run(kernel, celery, target, action.params.model_validate(params), admin)


def test_the_console_role_runs_every_action(owner: Kernel, pg_database_url: str) -> None:
    console = Kernel.open(_as(pg_database_url, "kernel_console"))
    try:
        job = _job(owner)
        running = _run(owner, job)
        owner.claim(running, owner="w1", lease=600)
        assert _act(console, "pause", running)["occurrence"]["control"]["state"] == (
            "pause_requested"
        )
        queued = _act(console, "run-now", job, force=True)["occurrence"]["id"]
        assert _act(console, "cancel", queued)["occurrence"]["status"] == "cancelled"
        owner.fail(running, owner="w1", fence=1, code="BOOM", message="x", retryable=False)
        assert _act(console, "requeue", running)["occurrence"]["status"] == "retry_wait"
        once = _job(owner, delivery="at-most-once")
        unknown = _run(owner, once)
        owner.claim(unknown, owner="w1", lease=0.01)
        time.sleep(0.05)
        owner.expire_leases()
        decided = _act(console, "adjudicate", unknown, decision="applied")
        assert decided["occurrence"]["status"] == "succeeded"
        assert _act(console, "disable", once)["changed"] is True
        assert _act(console, "enable", once)["changed"] is True
        assert _act(console, "prune", None, older_than="1s")["occurrences"] == 0
        spec = {"kind": "callable", "payload": {"callable": "os.path:join"}}
        made = _act(console, "apply", "made-by-console", spec=spec)
        assert made["jobs"] == [{"id": "made-by-console", "change": "created", "revision": 1}]
        revised = _act(
            console, "apply", "made-by-console", spec={**spec, "queue": "q2"}, expected_revision=1
        )
        assert revised["jobs"][0]["revision"] == 2
        assert _act(console, "delete", "made-by-console") == {"deleted": "made-by-console"}
        assert operations.status(console, celery)["counts"]["succeeded"] == 1
        for ddl in ("CREATE TABLE extra (id int)", "DROP TABLE events", "TRUNCATE jobs"):
            with console.engine.connect() as conn, pytest.raises(sa.exc.ProgrammingError):
                conn.execute(sa.text(ddl))
    finally:
        console.close()


def test_the_viewer_role_reads_everything_and_writes_nothing(
    owner: Kernel, pg_database_url: str
) -> None:
    job = _job(owner)
    past = Kernel.open(pg_database_url, clock=ManualClock(datetime(2026, 1, 2, tzinfo=UTC)))
    try:  # history settled in January, for a prune to delete
        old = past.run_now(job, request_id="old", operator="t", force=True).occurrence.id
        past.cancel(old, request_id="old-cancel", operator="t")
    finally:
        past.close()
    occ = _run(owner, job)
    viewer = Kernel.open(_as(pg_database_url, "kernel_viewer"))
    try:
        assert operations.status(viewer, celery)["counts"]["queued"] == 1
        assert operations.occurrence_detail(viewer, occ)["events"]
        assert operations.events(viewer, 0, None, None, 100)["events"]
        assert [j.id for j in viewer.list_jobs()] == [job]
        before = [o.to_dict() for o in owner.list_occurrences()], owner.last_event_id()
        for name, target, params in (
            ("cancel", occ, {}),
            ("run-now", job, {}),
            ("disable", job, {}),
            ("apply", job, {"spec": {"kind": "callable", "payload": {"callable": "a:b"}}}),
            ("prune", None, {"older_than": "1s"}),
        ):
            with pytest.raises(PermissionDenied) as refused:
                _act(viewer, name, target, **params)
            assert refused.value.code == "PERMISSION_DENIED"
            assert refused.value.details["role"] == "kernel_viewer"
            assert "'kernel_viewer' may not do this (permission denied for table" in str(
                refused.value
            )
        assert ([o.to_dict() for o in owner.list_occurrences()], owner.last_event_id()) == before
        assert owner.get_job(job).enabled
    finally:
        viewer.close()


def test_a_refused_grant_is_permission_denied_on_the_api_and_the_cli(
    owner: Kernel, pg_database_url: str, tmp_path: Path
) -> None:
    """The console served over the viewer role: an admin's action is answered 403
    PERMISSION_DENIED naming the role and the table, and so is the CLI's."""
    job = _job(owner)
    occ = _run(owner, job)
    viewer_url = _as(pg_database_url, "kernel_viewer")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CELERY_", "KERNEL_"))}
    env.update(
        KERNEL_DATABASE_URL=viewer_url,
        KERNEL_USERS_FILE=str(tmp_path / "users.json"),
        KERNEL_VAR_DIR=str(tmp_path / "var"),
    )
    token = make_users(tmp_path / "users.json")["admin"]
    proc, base = start_web("web-viewer-role", tmp_path, env)
    try:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}) as api:
            assert api.get(f"/api/occurrences/{occ}").json()["status"] == "queued"
            answer = api.post(f"/api/occurrences/{occ}/cancel", json={})
            disable = api.post(f"/api/jobs/{job}/disable")
    finally:
        stop(proc)
    for refused in (answer, disable):
        assert refused.status_code == 403, refused.text
        error = refused.json()["error"]
        assert error["code"] == "PERMISSION_DENIED"
        assert (
            "'kernel_viewer'" in error["message"]
            and "permission denied for table" in (error["message"])
        )
        assert "change-me" not in refused.text
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "celery_app",
            "kernel",
            "cancel",
            str(occ),
            "--json",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 1, cli.stderr
    assert json.loads(cli.stdout)["error"]["code"] == "PERMISSION_DENIED"
    assert "Traceback" not in cli.stderr
    assert owner.get_occurrence(occ).status == "queued" and owner.get_job(job).enabled
