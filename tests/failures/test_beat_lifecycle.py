"""Real ``celery beat`` processes: clean stops (SIGTERM, Ctrl-C) publish every hint and
deregister, an outage logs two lines, Beats gone silent leave ``status`` and are pruned."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from failures.support import Proxy, clean_env, run, start, stop

from kernel import Kernel
from kernel.testing import ManualClock

CELERY = ["celery", "-A", "celery_app"]


def _wait(check: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _jobs_file(tmp_path: Path) -> Path:
    path = tmp_path / "jobs.json"
    # overlap allow: with no worker, every firing stays queued and needs its hint.
    job = {
        "kind": "callable",
        "overlap": "allow",
        "payload": {"callable": "os.path:join", "args": ["a"]},
    }
    path.write_text(
        json.dumps(
            {"jobs": [{"id": f"every-{n}", "schedule": {"every": "1s"}, **job} for n in (1, 2)]}
        )
    )
    return path


def test_a_stopped_beat_has_hinted_everything_it_created_and_deregistered(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'kernel.db'}"
    env = clean_env(
        KERNEL_DATABASE_URL=url,
        KERNEL_JOBS_FILE=str(_jobs_file(tmp_path)),
        KERNEL_BEAT_INTERVAL="0.2",
    )
    beats = {
        sig: start(
            [*CELERY, "beat", "-s", str(tmp_path / f"{sig.name}-schedule")],
            cwd=tmp_path,
            env=env,
            log=tmp_path / f"{sig.name}.log",
        )
        for sig in (signal.SIGTERM, signal.SIGINT)
    }
    kernel = Kernel.open(url, migrate_schema=True)
    try:
        _wait(lambda: len(kernel.beats()) == 2, 30, "both Beats' heartbeats")
        _wait(lambda: len(kernel.list_occurrences()) >= 4, 30, "occurrences")
        # Stop each right after one of its ticks created an occurrence.
        for sig, proc in beats.items():
            seen = len(kernel.list_occurrences(limit=1000))
            _wait(lambda seen=seen: len(kernel.list_occurrences(limit=1000)) > seen, 10, "a tick")
            code, seconds = stop(proc, sig, timeout=15)
            assert code == (130 if sig == signal.SIGINT else 0)
            assert seconds < 5
        found = kernel.list_occurrences(limit=1000)
        assert {o.status.value for o in found} == {"queued"}
        assert [o.id for o in found if o.dispatched_at is None] == []
        assert kernel.beats() == []
        stopped = [e for e in kernel.events(limit=1000) if e.type == "beat_stopped"]
        assert len(stopped) == 2
    finally:
        kernel.close()
    for sig in beats:
        log = (tmp_path / f"{sig.name}.log").read_text()
        assert "Traceback" not in log, log


def test_beats_silent_past_the_retention_leave_status_and_are_pruned_with_an_event(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'kernel.db'}"
    clock = ManualClock(datetime.now(UTC) - timedelta(hours=2))
    old = Kernel.open(url, migrate_schema=True, clock=clock)
    old.record_beat("gone:1:a", host="gone", interval=1)
    old.close()
    env = clean_env(KERNEL_DATABASE_URL=url, KERNEL_BEAT_RETENTION="3600")
    status = run([*CELERY, "kernel", "status", "--json"], cwd=tmp_path, env=env)
    data = json.loads(status.out)
    assert data["beats"] == []
    assert "no Beat has ticked in the last 1h00m" in data["warnings"][0]
    assert (
        run([*CELERY, "kernel", "status", "--fail-on-stale-beat"], cwd=tmp_path, env=env).code == 3
    )
    pruned = run(
        [*CELERY, "kernel", "prune", "--older-than", "30d", "--json"], cwd=tmp_path, env=env
    )
    assert json.loads(pruned.out)["beats_forgotten"] == ["gone:1:a"]
    kernel = Kernel.open(url)
    try:
        assert kernel.beats() == []
        [event] = [e for e in kernel.events(limit=100) if e.type == "beat_forgotten"]
        assert event.data["beat_id"] == "gone:1:a"
    finally:
        kernel.close()


@pytest.mark.postgres
def test_an_outage_logs_one_warning_and_one_info_with_its_length(
    tmp_path: Path, pg_database_url: str
) -> None:
    real = sa.engine.make_url(pg_database_url)
    Kernel.open(pg_database_url, migrate_schema=True).close()
    proxy = Proxy((real.host or "127.0.0.1", real.port or 5432))
    via_proxy = real.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    log = tmp_path / "beat.log"
    env = clean_env(
        KERNEL_DATABASE_URL=via_proxy, KERNEL_BEAT_INTERVAL="0.2", KERNEL_CONNECT_TIMEOUT="1"
    )
    beat = start(
        [*CELERY, "beat", "-l", "INFO", "-s", str(tmp_path / "schedule")],
        cwd=tmp_path,
        env=env,
        log=log,
    )
    try:
        _wait(lambda: "Starting..." in log.read_text(), 30, "Beat to start")
        time.sleep(1)
        proxy.down()
        _wait(lambda: "kernel unavailable" in log.read_text(), 15, "the outage warning")
        time.sleep(3)  # ~15 ticks into the outage
        proxy.up()
        _wait(lambda: "kernel available again after" in log.read_text(), 15, "the recovery")
        code, _ = stop(beat, signal.SIGTERM, timeout=15)
    finally:
        proxy.down()
        if beat.poll() is None:
            stop(beat, signal.SIGKILL, timeout=5)
    text = log.read_text()
    assert code == 0
    assert text.count("kernel unavailable") == 1 and text.count("available again") == 1
    assert "Traceback" not in text, text
    warning = next(line for line in text.splitlines() if "kernel unavailable" in line)
    assert "WARNING" in warning and f"127.0.0.1:{proxy.port}" in warning
    seconds = float(text.split("available again after ")[1].split("s")[0])
    assert 3 <= seconds < 20
