"""Listings that say what they hold: paused occurrences, event pages that say when more
exist, sub-second durations, doctor details in full."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli.support import define

from celery_app.operations import format_age
from celery_app.warm_shutdown import shutdown_marker
from kernel import Kernel


def _paused(kernel: Kernel, job_id: str) -> int:
    occ = kernel.run_now(job_id, request_id=f"r-{job_id}", operator="t", force=True).occurrence.id
    kernel.claim(occ, owner="w1", lease=30)
    kernel.request_pause(
        occ,
        expected_fence=1,
        request_id=f"p-{job_id}",
        safe_points=["adapter_checkpoint"],
        operator="t",
    )
    kernel.ack_pause(
        occ,
        owner="w1",
        fence=1,
        request_id=f"p-{job_id}",
        expected_revision=None,
        safe_point="adapter_checkpoint",
        checkpoint={"done": 1},
    )
    return occ


def test_occurrences_list_status_paused_and_the_state_column(cli, kernel: Kernel) -> None:
    define(kernel, "a")
    define(kernel, "b")
    paused = _paused(kernel, "a")
    queued = kernel.run_now("b", request_id="rb", operator="t", force=True).occurrence.id
    listed = cli("occurrences", "list", "--status", "paused", "--json").json()
    assert [o["id"] for o in listed] == [paused]
    both = cli("occurrences", "list", "--status", "paused", "--status", "queued", "--json").json()
    assert sorted(o["id"] for o in both) == sorted([paused, queued])
    table = cli("occurrences", "list").out.splitlines()
    row = next(line for line in table if line.split()[0] == str(paused))
    assert row.split()[2] == "paused"
    assert "status            paused\n" in cli("occurrences", "show", str(paused)).out


def test_events_pages_say_when_more_exist_forwards_and_backwards(cli, kernel: Kernel) -> None:
    for n in range(5):
        define(kernel, f"job-{n}")  # one job_defined event each: ids 1..5
    first = cli("events", "--limit", "2", "--json").json()
    assert [e["id"] for e in first["events"]] == [1, 2] and first["more"] is True
    assert "(more events after id 2: --after 2)" in cli("events", "--limit", "2").out
    last = cli("events", "--after", "3", "--json").json()
    assert [e["id"] for e in last["events"]] == [4, 5] and last["more"] is False
    newest = cli("events", "--before", "5", "--limit", "2", "--json").json()
    assert [e["id"] for e in newest["events"]] == [3, 4] and newest["more"] is True
    assert (
        "(older events before id 3: --before 3)"
        in cli("events", "--before", "5", "--limit", "2").out
    )
    oldest = cli("events", "--before", "3", "--json").json()
    assert [e["id"] for e in oldest["events"]] == [1, 2] and oldest["more"] is False
    assert cli("events", "--before", "3", "--follow").code == 2


def test_durations_below_a_second_keep_their_precision(cli, kernel: Kernel) -> None:
    assert [format_age(s) for s in (0.5, 0.25, 0.05, 0, 1.2, 75)] == [
        "0.5s",
        "0.25s",
        "0.05s",
        "0s",
        "1s",
        "1m15s",
    ]
    kernel.record_beat("beat-1", host="h1", interval=0.5)
    row = next(line for line in cli("status").out.splitlines() if line.startswith("beat-1"))
    assert row.split()[2] == "0.5s"


def test_doctor_prints_a_failing_check_in_full(
    cli, db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = tmp_path / ("a-long-folder-name-" * 6) / "jobs.yaml"
    monkeypatch.setenv("KERNEL_JOBS_FILE", str(missing))
    out = cli("doctor").out
    line = next(line for line in out.splitlines() if line.startswith("jobs file"))
    assert len(line) > 120 and line.endswith("or no value") and str(missing) in line


@pytest.mark.timeout(90)
def test_a_worker_removes_its_warm_shutdown_marker_when_it_stops(
    kernel: Kernel, db_url: str
) -> None:
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "celery_app",
            "worker",
            "-c",
            "1",
            "-l",
            "INFO",
            "--without-mingle",
            "--without-gossip",
            "--without-heartbeat",
        ],
        cwd=Path(db_url.removeprefix("sqlite:///")).parent,
        env={**os.environ, "KERNEL_DATABASE_URL": db_url},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert worker.stdout is not None
        for text in iter(worker.stdout.readline, ""):
            if " ready." in text:
                break
        worker.send_signal(signal.SIGTERM)
        began = time.monotonic()
        while not shutdown_marker(worker.pid).exists() and worker.poll() is None:
            time.sleep(0.01)  # the marker exists while the warm shutdown runs
        assert worker.wait(timeout=60) == 0
        assert time.monotonic() - began < 60
        assert not shutdown_marker(worker.pid).exists()
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
        assert worker.stdout is not None
        worker.stdout.close()
