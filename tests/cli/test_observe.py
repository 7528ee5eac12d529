"""``kernel status``, ``events`` (with ``--follow``), ``doctor``, ``migrate`` and ``prune``."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from cli.support import Lines, define, stop

from adapters.supervisor import containment
from kernel import Kernel
from kernel.db.schema import jobs
from kernel.records import dumps

CELERY = str(Path(sys.executable).with_name("celery"))


def test_status_counts_and_a_fresh_beat(cli, kernel: Kernel) -> None:
    define(kernel, "a")
    for n in range(3):
        kernel.run_now("a", request_id=f"r{n}", operator="t", force=True)
    kernel.claim(1, owner="w1", lease=5)
    kernel.claim(2, owner="w1", lease=60)
    kernel.fail(2, owner="w1", fence=1, code="BOOM", message="x", retryable=False)
    kernel.record_beat("beat-1", host="h1", interval=60)
    data = cli("status", "--json").json()
    assert {k: v for k, v in data["counts"].items() if v} == {
        "queued": 1,
        "running": 1,
        "dead_letter": 1,
    }
    assert (data["dead_letters"], data["needs_adjudication"], data["paused"]) == (1, 0, 0)
    assert data["leases_expiring_10s"] == 1
    assert data["oldest_claimable_age_s"] >= 0
    assert [(b["id"], b["host"], b["stale"]) for b in data["beats"]] == [("beat-1", "h1", False)]
    assert data["warnings"] == []
    text = cli("status").out
    assert "dead letters                1" in text
    assert "beat-1" in text and "WARNING" not in text


def test_status_names_what_the_oldest_claimable_occurrence_waits_for(cli, kernel: Kernel) -> None:
    """Issue 39 item 9: "oldest claimable waiting 9m" said nothing of why."""
    define(kernel, "held", pool="p")
    first, second = (
        kernel.run_now("held", request_id=f"r{n}", operator="t", force=True).occurrence.id
        for n in range(2)
    )
    assert kernel.claim(second, owner="w1", lease=60) is not None  # pool p (limit 1) is full
    data = cli("status", "--json").json()
    assert data["oldest_claimable_id"] == first
    assert (data["oldest_claimable_blocker"]["kind"], data["oldest_claimable_blocker"]["pool"]) == (
        "pool_full",
        "p",
    )
    assert re.search(
        rf"^oldest claimable\s+waiting \S+ \(occurrence {first}: pool p is full\)$",
        cli("status").out,
        re.M,
    ), cli("status").out


def test_status_warns_about_the_adjudication_backlog(cli, kernel: Kernel) -> None:
    define(kernel, "once", delivery="at-most-once", lease="5s", kill_grace="0.5s")
    occ = kernel.run_now("once", request_id="r", operator="t").occurrence.id
    kernel.claim(occ, owner="w1", lease=0.05)
    time.sleep(0.1)
    kernel.expire_leases()
    kernel.record_beat("beat-1", host="h1", interval=60)
    data = cli("status", "--json").json()
    assert data["watchdog"]["needs_adjudication"] == 1
    [warning] = data["warnings"]
    assert warning.startswith("1 occurrence(s) await adjudication")
    assert "WARNING" in cli("status").out


def test_status_warns_when_no_beat_ticked_within_three_intervals(cli, kernel: Kernel) -> None:
    empty = cli("status", "--json").json()
    assert "no Beat has ticked in the last 10m00s" in empty["warnings"][0]
    kernel.record_beat("beat-1", host="h1", interval=0.01)
    time.sleep(0.05)
    data = cli("status", "--json").json()
    assert data["beats"][0]["stale"] is True
    assert "no Beat has ticked within 3x its interval" in data["warnings"][0]
    text = cli("status")
    assert text.code == 0
    assert "STALE" in text.out
    assert "WARNING: no Beat has ticked within 3x" in text.out
    assert cli("status", "--fail-on-stale-beat").code == 3
    kernel.record_beat("beat-2", host="h2", interval=60)
    assert cli("status", "--fail-on-stale-beat", "--json").code == 0


def test_events_page_by_id_and_filter(cli, kernel: Kernel) -> None:
    define(kernel, "a")
    define(kernel, "b")
    kernel.run_now("a", request_id="r1", operator="t", force=True)
    kernel.run_now("b", request_id="r2", operator="t", force=True)
    everything = cli("events", "--json").json()
    assert [e["type"] for e in everything["events"]] == [
        "job_defined",
        "job_defined",
        "occurrence_created",
        "job_run_now",
        "occurrence_created",
        "job_run_now",
    ]
    assert everything["last_id"] == everything["events"][-1]["id"]
    page = cli("events", "--after", "2", "--limit", "2", "--json").json()
    assert [e["id"] for e in page["events"]] == [3, 4]
    assert page["cursor"] == "4"  # on SQLite the cursor is the last id
    only_b = cli("events", "--job", "b", "--json").json()["events"]
    assert {e["job_id"] for e in only_b} == {"b"}
    occ = cli("events", "--occurrence", "1", "--json").json()["events"]
    assert {e["occurrence_id"] for e in occ} == {1}
    lines = cli("events", "--job", "a").out.splitlines()
    assert lines[0].split() == ["ID", "AT", "TYPE", "JOB", "OCCURRENCE", "DATA"]
    assert lines[2].split()[2:5] == ["occurrence_created", "a", "1"]
    assert cli("events", "--after", "999").out.strip() == "(no events)"


def test_events_follow_streams_new_events_until_interrupted(spawn, kernel: Kernel) -> None:
    define(kernel, "old")
    as_json = spawn("events", "--follow", "--json", "--interval", "0.1")
    as_text = spawn("events", "-f", "--job", "new", "--interval", "0.1")
    out_json, out_text = Lines(as_json.stdout), Lines(as_text.stdout)
    for proc in (as_json, as_text):
        assert "following events after id 1" in Lines(proc.stderr).next()
    define(kernel, "new")
    kernel.run_now("new", request_id="r", operator="t", force=True)
    first = json.loads(out_json.next())
    assert (first["type"], first["job_id"]) == ("job_defined", "new")
    assert json.loads(out_json.next())["type"] == "occurrence_created"
    assert "job_defined  new" in out_text.next()
    for proc in (as_json, as_text):
        assert stop(proc, signal.SIGINT) == 130  # Ctrl-C, as shells report it
        assert "Traceback" not in proc.stderr.read() + proc.stdout.read()


def test_doctor_reports_a_healthy_kernel(cli, kernel: Kernel) -> None:
    define(kernel, "a", timeout="1m")
    kernel.record_beat("beat-1", host="h1", interval=60)
    data = cli("doctor", "--json").json()
    assert data["ok"] is True
    checks = {c["name"]: c["status"] for c in data["checks"]}
    assert checks == {
        "settings": "ok",
        "zone": "ok",
        "jobs file": "ok",
        "adapters": "ok",
        "shell": "ok",
        "schedule": "ok",
        "database": "ok",
        "schema": "ok",
        "file modes": "ok",
        "stored secrets": "ok",
        "schedules": "ok",
        "secret files": "ok",
        "job kinds": "ok",
        "job env": "ok",
        "timeouts": "ok",
        "attempts": "ok",
        "beat": "ok",
        "attention": "ok",
        "broker": "ok",
    }
    text = cli("doctor")
    assert text.code == 0
    assert re.search(r"^job kinds +OK ", text.out, re.MULTILINE)


def test_doctor_shows_every_jobs_effective_attempts(cli, kernel: Kernel) -> None:
    """Issue 38 item 4: failures spend max_attempts, dead workers max_lost_leases."""
    define(kernel, "a", timeout="1m", max_attempts=4)
    define(kernel, "b", timeout="1m", max_lost_leases=0)
    checks = {c["name"]: c for c in cli("doctor", "--json").json()["checks"]}
    detail = checks["attempts"]["detail"]
    assert detail == "a 4 attempts, 3 lost leases; b 3 attempts, 0 lost leases"


def test_status_and_doctor_list_a_job_beat_cannot_plan(cli, kernel: Kernel) -> None:
    define(kernel, "broken")
    define(kernel, "fine")
    kernel.record_beat("beat-1", host="h1", interval=60)
    # As Beat records it (celery_app/beat/firings.py) when the job's schedule cannot be planned.
    error = "its schedule cannot be planned: OverflowError: date value out of range"
    assert kernel.record_unplannable("broken", revision=1, error=error)
    data = cli("status", "--json").json()
    assert data["unplannable_jobs"] == [{"job_id": "broken", "revision": 1, "error": error}]
    [warning] = data["warnings"]
    assert warning.startswith("job broken (revision 1) cannot be planned") and error in warning
    assert f"WARNING: {warning}" in cli("status").out
    result = cli("doctor", "--json")
    assert result.code == 1
    checks = {c["name"]: c for c in result.json()["checks"]}
    assert checks["schedules"]["status"] == "fail"
    assert f"broken (revision 1): {error}" in checks["schedules"]["detail"]
    assert "fine" not in checks["schedules"]["detail"]
    assert re.search(r"^schedules +FAIL .*broken", cli("doctor").out, re.MULTILINE)


def test_doctor_warns_about_open_secrets_files_users_file_and_var_folder(
    cli, kernel: Kernel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    var = tmp_path / "var"
    var.mkdir(mode=0o755)
    var.chmod(0o755)
    users = var / "users.json"
    users.write_text("{}")
    users.chmod(0o644)
    secrets = tmp_path / "secrets.json"
    secrets.write_text("{}")
    secrets.chmod(0o640)
    monkeypatch.setenv("KERNEL_VAR_DIR", str(var))
    monkeypatch.setenv("KERNEL_SECRETS_FILE", str(secrets))

    check = {c["name"]: c for c in cli("doctor", "--json").json()["checks"]}["secret files"]
    assert check["status"] == "warn"
    assert f"{secrets} is 0640 (chmod 600 {secrets})" in check["detail"]
    assert f"{users} is 0644 (chmod 600 {users})" in check["detail"]
    assert f"{var} is 0755 (chmod 700 {var})" in check["detail"]

    for path, private in ((var, 0o700), (users, 0o600), (secrets, 0o600)):
        path.chmod(private)
    check = {c["name"]: c for c in cli("doctor", "--json").json()["checks"]}["secret files"]
    assert check["status"] == "ok"


def test_doctor_warns_about_open_files_and_secrets_stored_in_clear(
    cli, kernel: Kernel, db_url: str
) -> None:
    define(kernel, "legacy")
    # As a release that accepted them stored it: the spec is written as it was then.
    stored = {**kernel.get_job("legacy").spec}
    stored["kind"] = "http"
    stored["payload"] = {"url": "http://h/", "headers": {"Authorization": "Bearer s3cret"}}
    with kernel.engine.begin() as conn:
        conn.execute(sa.update(jobs).values(spec=dumps(stored)))
    database = Path(db_url.removeprefix("sqlite:///"))
    database.parent.chmod(0o755)
    database.chmod(0o644)

    result = cli("doctor", "--json")
    assert result.code == 0  # warnings, not failures
    checks = {c["name"]: c for c in result.json()["checks"]}
    assert checks["file modes"]["status"] == "warn"
    assert (
        f"{database.parent} is 0755 (chmod 700 {database.parent})" in checks["file modes"]["detail"]
    )
    assert f"{database} is 0644 (chmod 600 {database})" in checks["file modes"]["detail"]
    assert checks["stored secrets"]["status"] == "warn"
    assert "legacy (payload.headers.Authorization)" in checks["stored secrets"]["detail"]
    assert "s3cret" not in result.out


def test_doctor_says_how_shell_runs_are_contained(
    cli, kernel: Kernel, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = containment()
    detail = {c["name"]: c["detail"] for c in cli("doctor", "--json").json()["checks"]}
    assert detail["shell"] == f"runs contained by {host[0]}: {host[1]}"
    monkeypatch.setenv("KERNEL_CONTAINMENT", "subreaper")
    detail = {c["name"]: c["detail"] for c in cli("doctor", "--json").json()["checks"]}
    assert detail["shell"] == "runs contained by subreaper: forced (KERNEL_CONTAINMENT=subreaper)"


def test_doctor_fails_on_an_unmigrated_database(cli, db_url: str) -> None:
    result = cli("doctor", "--json")
    assert result.code == 1
    database = [c for c in result.json()["checks"] if c["name"] == "database"][0]
    assert database["status"] == "fail"
    assert "SCHEMA_UNKNOWN" in database["detail"]
    text = cli("doctor")
    assert text.code == 1
    assert "database   FAIL" in text.out  # names padded to "jobs file"


def test_doctor_flags_jobs_without_an_adapter_and_stuck_work(cli, kernel: Kernel) -> None:
    kernel.define_job({"id": "exotic", "kind": "no-such-kind", "payload": {}})
    occ = kernel.run_now("exotic", request_id="r", operator="t", force=True).occurrence.id
    kernel.claim(occ, owner="w", lease=60)
    kernel.fail(occ, owner="w", fence=1, code="X", message="x", retryable=False)
    checks = {c["name"]: c for c in cli("doctor", "--json").json()["checks"]}
    assert checks["job kinds"]["status"] == "fail"
    assert "exotic" in checks["job kinds"]["detail"]
    assert checks["attention"]["status"] == "warn"
    assert checks["beat"]["status"] == "warn"


def test_commands_refuse_an_unmigrated_database_and_migrate_fixes_it(cli, db_url: str) -> None:
    refused = cli("jobs", "list", "--json")
    assert (refused.code, refused.json()["error"]["code"]) == (1, "SCHEMA_UNKNOWN")
    assert "kernel migrate" in cli("status").err
    first = cli("migrate", "--json").json()
    assert (first["before"], first["changed"]) == (None, True)
    again = cli("migrate")
    assert "changed        no" in again.out
    assert cli("jobs", "list", "--json").json() == []


def test_prune_removes_old_settled_history_only(cli, kernel: Kernel) -> None:
    define(kernel, "a")
    done = kernel.run_now("a", request_id="r1", operator="t", force=True).occurrence.id
    kernel.claim(done, owner="w", lease=60)
    kernel.succeed(done, owner="w", fence=1)
    dead = kernel.run_now("a", request_id="r2", operator="t", force=True).occurrence.id
    kernel.claim(dead, owner="w", lease=60)
    kernel.fail(dead, owner="w", fence=1, code="X", message="x", retryable=False)
    time.sleep(0.02)
    assert cli("prune", "--older-than", "1d", "--json").json()["occurrences"] == 0
    result = cli("prune", "--older-than", "0.01s", "--json").json()
    assert (result["occurrences"], result["older_than_s"]) == (1, 0.01)
    assert [o.id for o in kernel.list_occurrences()] == [dead]
    assert "pruned 0 occurrence(s)" in cli("prune", "--older-than", "0.01s").out
    bad = cli("prune", "--older-than", "soon", "--json")
    assert (bad.code, bad.json()["error"]["details"]["field"]) == (1, "older_than")
    assert kernel.prune(older_than=timedelta(seconds=0.01)) == {"occurrences": 0, "events": 0}


def test_the_cli_finds_the_config_module_and_imports_from_the_working_directory(
    kernel: Kernel, db_url: str, tmp_path: Path
) -> None:
    """As `celery worker` does: no PYTHONPATH, the modules sit in the current directory."""
    (tmp_path / "user_settings.py").write_text(
        'imports = ["user_tasks"]\n'
        'beat_schedule = {"a b": {"task": "user.t", "schedule": 60},\n'
        '                 "a-b": {"task": "user.t", "schedule": 60}}\n'
    )
    (tmp_path / "user_tasks.py").write_text(
        "from celery import shared_task\n\n@shared_task(name='user.t', soft_time_limit=5)\n"
        "def t():\n    pass\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(CELERY_CONFIG_MODULE="user_settings", KERNEL_DATABASE_URL=db_url)
    done = subprocess.run(
        [CELERY, "-A", "celery_app", "kernel", "doctor", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in done.stderr, done.stderr
    checks = json.loads(done.stdout)["checks"]
    refused = [c for c in checks if c["name"] == "schedule"]
    assert [c["status"] for c in refused] == ["fail", "fail"]
    assert all("'a b' and 'a-b'" in c["detail"] for c in refused)
