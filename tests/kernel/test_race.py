"""Four OS processes claim and settle 2,000 occurrences on one kernel (SQLite and PostgreSQL).

Every occurrence must settle exactly once, no occurrence may be claimed twice, and no
write with a stale fence or a foreign owner may be accepted.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

from kernel import Kernel
from kernel.testing import ManualClock

pytestmark = pytest.mark.long

OCCURRENCES = 2_000
WORKERS = 4
WORKER = Path(__file__).with_name("race_worker.py")


def _materialise(url: str) -> None:
    """Create the occurrences the way Beat does: cursor advances through ``Kernel.fire``."""
    clock = ManualClock()
    kernel = Kernel.open(url, migrate_schema=True, clock=clock)
    kernel.define_job(
        {
            "id": "race",
            "kind": "callable",
            "payload": {"callable": "m:f"},
            "overlap": "allow",
            "max_queued": 10000,
        }
    )
    start = clock.now - timedelta(hours=1)
    cursor = None
    for batch in range(0, OCCURRENCES, 500):
        firings = [(f"race:{n}", start + timedelta(seconds=n)) for n in range(batch, batch + 500)]
        nxt = (f"race:{batch + 500}", start + timedelta(seconds=batch + 500))
        report = kernel.fire(
            "race", expected_revision=1, expected_cursor=cursor, firings=firings, next_cursor=nxt
        )
        assert not report.stale and len(report.created) == 500
        cursor = nxt[0]
    kernel.close()


def test_four_processes_settle_every_occurrence_exactly_once(
    kernel_url: str, tmp_path: Path
) -> None:
    _materialise(kernel_url)
    logs = [tmp_path / f"w{i}.jsonl" for i in range(WORKERS)]
    go = tmp_path / "go"
    workers = [
        subprocess.Popen(
            [sys.executable, str(WORKER), kernel_url, f"w{i}", str(log), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for i, log in enumerate(logs)
    ]
    # Each worker creates its log once its kernel is open; then all start at once.
    deadline = time.monotonic() + 60
    while not all(log.exists() for log in logs):
        assert time.monotonic() < deadline and all(w.poll() is None for w in workers)
        time.sleep(0.01)
    go.touch()
    for worker in workers:
        output, _ = worker.communicate(timeout=240)
        assert worker.returncode == 0, output.decode()

    records = [json.loads(line) for log in logs for line in log.read_text().splitlines()]
    claims = Counter(r["claim"] for r in records if "claim" in r)
    stale = [r for r in records if "stale" in r]
    assert len(claims) == OCCURRENCES and set(claims.values()) == {1}, "double claim"
    assert stale and not any(r["accepted"] for r in stale), "stale write accepted"
    assert all(log.read_text() for log in logs), "a worker took no part in the race"

    kernel = Kernel.open(kernel_url)
    try:
        occurrences = kernel.list_occurrences(job_id="race", limit=1000)
        occurrences += kernel.list_occurrences(
            job_id="race", limit=1000, before_id=occurrences[-1].id
        )
        assert len(occurrences) == OCCURRENCES
        assert {o.status.value for o in occurrences} == {"succeeded"}
        assert {o.fence for o in occurrences} == {1}
        settled, claimed, cursor = Counter(), Counter(), 0
        while page := kernel.events(after_id=cursor, job_id="race", limit=1000):
            cursor = page[-1].id
            for event in page:
                if event.type == "occurrence_succeeded":
                    settled[event.occurrence_id] += 1
                elif event.type == "occurrence_claimed":
                    claimed[event.occurrence_id] += 1
        assert len(settled) == len(claimed) == OCCURRENCES
        assert set(settled.values()) == set(claimed.values()) == {1}
    finally:
        kernel.close()
