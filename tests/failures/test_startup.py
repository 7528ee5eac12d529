"""Every entry point refuses a bad environment with one sentence: the real CLI, worker and
Beat as processes, a PostgreSQL that never answers, SQLite files that do not exist."""

from __future__ import annotations

import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from celery import Celery
from celery.bin.celery import celery as celery_main
from click.testing import CliRunner
from failures.support import Done, clean_env, hanging_server, run, start, stop

from celery_app.setting_values import ConfigInvalid
from celery_app.settings import KernelSettings
from kernel import Kernel

CELERY = ["celery", "-A", "celery_app"]


def _all(jobs: list[tuple[list[str], dict[str, str]]], cwd: Path) -> list[Done]:
    """Run the commands side by side (each takes a second or more just to import)."""
    with ThreadPoolExecutor(3) as pool:
        return list(pool.map(lambda job: run(job[0], cwd=cwd, env=job[1]), jobs))


def test_a_postgresql_that_never_answers_gives_storage_unavailable_in_bounded_time(
    tmp_path: Path,
) -> None:
    with hanging_server() as server:
        url = f"postgresql+psycopg://kernel:secret@127.0.0.1:{server.port}/kernel?sslpassword=key"
        env = clean_env(KERNEL_DATABASE_URL=url, KERNEL_CONNECT_TIMEOUT="1")
        status, beat, worker = _all(
            [
                ([*CELERY, "kernel", "status", "--json"], env),
                ([*CELERY, "beat", "-s", str(tmp_path / "schedule")], env),
                ([*CELERY, "worker", "-c", "1", "--without-mingle", "--without-gossip"], env),
            ],
            tmp_path,
        )
    error = json.loads(status.out)["error"]
    assert status.code == 1 and error["code"] == "STORAGE_UNAVAILABLE"
    masked = f"postgresql+psycopg://kernel:***@127.0.0.1:{server.port}/kernel?sslpassword=***"
    assert masked in error["message"] and "secret" not in status.out and "=key" not in status.out
    for done in (beat, worker):
        assert done.code == 1, done.out + done.err
        assert "STORAGE_UNAVAILABLE" in done.err and masked in done.err
    for done in (status, beat, worker):
        done.assert_no_traceback()
        # Documented: about twice KERNEL_CONNECT_TIMEOUT (with and without SSL), plus
        # start-up, which on a loaded 2-core machine alone can take ten seconds.
        assert done.seconds < 45, done.seconds


def test_read_only_commands_create_nothing_and_name_the_missing_database(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "no" / "such" / "kernel.db"
    env = clean_env(KERNEL_DATABASE_URL=f"sqlite:///{missing}")
    commands = [["status"], ["events"], ["occurrences", "list"], ["exporter", "--port", "0"]]
    for done in _all([([*CELERY, "kernel", *command], env) for command in commands], tmp_path):
        assert done.code == 1
        assert f"no kernel database at {missing}" in done.err and "kernel migrate" in done.err
        done.assert_no_traceback()
    assert list(tmp_path.iterdir()) == []


def test_the_default_location_is_not_created_by_a_read(tmp_path: Path) -> None:
    # The default kernel is under the project's directory: here, the settings module's.
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "project_settings.py").write_text("")
    env = clean_env(CELERY_CONFIG_MODULE="project_settings", PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] += os.pathsep + str(project)
    done = run([*CELERY, "kernel", "status", "--json"], cwd=elsewhere, env=env)
    assert done.code == 1
    assert json.loads(done.out)["error"]["code"] == "SCHEMA_UNKNOWN"
    assert str(project / "var" / "kernel.db") in done.out
    assert sorted(p.name for p in project.iterdir()) == ["project_settings.py"]
    assert list(elsewhere.iterdir()) == []


_BAD_SETTINGS = [
    ("KERNEL_BEAT_INTERVAL", "abc", "a number of seconds from 0.05 to 300"),
    ("KERNEL_BEAT_INTERVAL", "0", "a number of seconds from 0.05 to 300"),
    ("KERNEL_AUTO_MIGRATE", "maybe", "true or false"),
    ("KERNEL_SQLITE_SYNCHRONOUS", "OFF", "FULL or NORMAL"),
    ("KERNEL_CONNECT_TIMEOUT", "never", "a number of seconds from 1 to 3600"),
    ("KERNEL_STATEMENT_TIMEOUT", "-1", "a number of seconds from 0.1 to 86400"),
    ("KERNEL_BEAT_RETENTION", "x", "a number of seconds from 1 to 2592000"),
    ("KERNEL_DATABASE_URL", "mysql://db/x", "unsupported database 'mysql'"),
    ("KERNEL_DATABASE_URL", "not a url", "not a SQLAlchemy URL"),
    ("KERNEL_DATABASE_URL", "postgresql://db:port/x", "not a SQLAlchemy URL"),
    ("KERNEL_DATABASE_URL", "postgresql+nodriver://db/x", "no SQLAlchemy driver"),
]


@pytest.mark.parametrize(("variable", "value", "allowed"), _BAD_SETTINGS)
def test_a_bad_setting_is_named_with_its_value_and_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, allowed: str
) -> None:
    # In-process (the same click entry point): nine interpreters would cost a minute here.
    # The subprocess form of the same refusal is covered for Beat and the worker below.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(variable, value)
    result = CliRunner().invoke(celery_main, [*CELERY[1:], "kernel", "status"])
    assert result.exit_code == 2, result.output
    assert f"{variable}={value!r}" in result.stderr and allowed in result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_worker_and_beat_refuse_a_bad_environment_with_exit_2_and_status_still_works(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'kernel.db'}"
    Kernel.open(url, migrate_schema=True).close()
    blocked = tmp_path / "blocked"
    blocked.write_text("a file, not a folder")
    missing_jobs = clean_env(KERNEL_DATABASE_URL=url, KERNEL_JOBS_FILE=str(tmp_path / "nope.yaml"))
    beat, worker, bad_interval, status = _all(
        [
            ([*CELERY, "beat", "-s", str(tmp_path / "schedule")], missing_jobs),
            (
                [*CELERY, "worker", "-c", "1"],
                clean_env(KERNEL_DATABASE_URL=url, KERNEL_VAR_DIR=str(blocked / "var")),
            ),
            (
                [*CELERY, "beat", "-s", str(tmp_path / "schedule")],
                clean_env(KERNEL_DATABASE_URL=url, KERNEL_BEAT_INTERVAL="abc"),
            ),
            ([*CELERY, "kernel", "status", "--json"], missing_jobs),
        ],
        tmp_path,
    )
    missing = f"{tmp_path / 'nope.yaml'}: file: cannot be read: No such file or directory"
    assert beat.code == 2 and f"Error INVALID_ARGUMENT: {missing}" in beat.err, beat.err
    assert worker.code == 2 and f"KERNEL_VAR_DIR='{blocked / 'var'}'" in worker.err
    assert bad_interval.code == 2 and "KERNEL_BEAT_INTERVAL='abc'" in bad_interval.err
    assert status.code == 0, status.out + status.err
    for done in (beat, worker, bad_interval, status):
        done.assert_no_traceback()


def test_worker_and_beat_refuse_a_malformed_broker_or_database_url_in_one_line(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'kernel.db'}"
    Kernel.open(url, migrate_schema=True).close()
    worker = [*CELERY, "worker", "-c", "1", "--without-mingle", "--without-gossip"]
    beat = [*CELERY, "beat", "-s", str(tmp_path / "schedule")]
    no_port = "redis://:hunter2@cache:port/0"
    runs = _all(
        [
            (worker, clean_env(KERNEL_DATABASE_URL=url, CELERY_BROKER_URL=no_port)),
            (beat, clean_env(KERNEL_DATABASE_URL=url, CELERY_BROKER_URL="nosuch://cache")),
            (worker, clean_env(KERNEL_DATABASE_URL="postgresql://u:hunter2@db:port/x")),
            (beat, clean_env(KERNEL_DATABASE_URL="postgresql://u:hunter2@db:port/x")),
        ],
        tmp_path,
    )
    named_each = ["CELERY_BROKER_URL"] * 2 + ["KERNEL_DATABASE_URL"] * 2
    for done, named in zip(runs, named_each, strict=True):
        done.assert_no_traceback()
        assert done.code == 2, done.out + done.err
        refusal = [line for line in done.err.splitlines() if "cannot start" in line]
        assert len(refusal) == 1 and f"{named}=" in refusal[0], done.err
        assert "hunter2" not in done.out + done.err


def test_every_duration_setting_takes_a_bare_number_of_seconds_or_a_duration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for variable, value in {
        "KERNEL_DEFAULT_TIMEOUT": "60",
        "KERNEL_RETENTION_SUCCEEDED": "86400",
        "KERNEL_BEAT_INTERVAL": "2s",
        "KERNEL_WATCHDOG_GRACE": "2m",
        "KERNEL_STATEMENT_TIMEOUT": "1.5",
    }.items():
        monkeypatch.setenv(variable, value)
    settings = KernelSettings.from_app(Celery("settings", set_as_current=False))
    assert settings.default_timeout == 60.0
    assert settings.retention["succeeded"] == 86400.0
    assert (settings.beat_interval, settings.watchdog_grace) == (2.0, 120.0)
    assert settings.statement_timeout == 1.5


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("KERNEL_BEAT_INTERVAL", "\uff12"),  # full-width digits are not a number here
        ("KERNEL_DEFAULT_TIMEOUT", "\uff16\uff10s"),
        ("KERNEL_RETENTION_SUCCEEDED", "\uff18\uff16\uff14\uff10\uff10"),
    ],
)
def test_full_width_digits_are_refused_in_durations(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigInvalid, match=variable):
        KernelSettings.from_app(Celery("settings", set_as_current=False))


def test_settings_past_the_range_of_a_number_are_refused(tmp_path: Path) -> None:
    app = Celery("settings", set_as_current=False)
    app.conf.kernel_dispatch_batch = float("inf")  # int() of it overflows
    with pytest.raises(ConfigInvalid, match="kernel_dispatch_batch=inf"):
        KernelSettings.from_app(app)


def test_a_password_in_the_query_is_masked_by_beat_and_doctor(
    tmp_path: Path, pg_database_url: str
) -> None:
    url = f"{pg_database_url}?password=hunter2"  # trust auth: accepted and ignored
    env = clean_env(KERNEL_DATABASE_URL=url)
    log = tmp_path / "beat.log"
    beat = start(
        [*CELERY, "beat", "-s", str(tmp_path / "schedule")], cwd=tmp_path, env=env, log=log
    )
    try:
        deadline = time.monotonic() + 60
        while "kernel -> " not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        doctor = run([*CELERY, "kernel", "doctor"], cwd=tmp_path, env=env)
    finally:
        stop(beat, signal.SIGTERM, 30)
    banner = log.read_text()
    assert "?password=***" in banner, banner
    assert "?password=***" in doctor.out, doctor.out + doctor.err
    assert "hunter2" not in banner + doctor.out + doctor.err


def test_beat_refuses_an_invalid_jobs_file_with_the_clis_message(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'kernel.db'}"
    Kernel.open(url, migrate_schema=True).close()
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(
        "jobs:\n"
        "  - {id: first, kind: shell, schedule: {every: -5s}, payload: {argv: 'true'}}\n"
        "  - {id: second, kind: shel, payload: {argv: ['true']}}\n"
    )
    env = clean_env(KERNEL_DATABASE_URL=url, KERNEL_JOBS_FILE=str(jobs))
    beat, apply = _all(
        [
            ([*CELERY, "beat", "-s", str(tmp_path / "schedule")], env),
            ([*CELERY, "kernel", "jobs", "apply", str(jobs)], env),
        ],
        tmp_path,
    )
    cli_message = apply.err.strip()
    assert apply.code == 1 and "jobs[1] ('second'): kind:" in cli_message, apply.err
    assert beat.code == 2 and f"cannot start: {cli_message}" in beat.err, beat.err
    for done in (beat, apply):
        done.assert_no_traceback()
    kernel = Kernel.open(url)
    assert kernel.list_jobs() == []
    kernel.close()
