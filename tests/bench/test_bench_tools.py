"""The benchmarks' own arithmetic: the two-schedulers ledger count, the profile split, RSS,
and the round trips of a claim and a settle."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.latency import percentiles
from bench.peers import _count
from bench.profile_worker import classify
from bench.round_trips import _measure
from bench.support import CpuMeter, process_tree_memory


def test_ledger_count_finds_duplicates_and_misses_inside_the_window() -> None:
    # Slots 10..14 are in [10, 15): 11 ran twice, 13 never; 9 and 15 are outside.
    slots = [9.0, 10.0, 11.0, 11.2, 12.0, 14.0, 15.0]
    assert _count(slots, 1.0, 10.0, 15.0) == (5, 1, 1)
    # Minute slots: 120 and 180 fall in [100, 200).
    assert _count([120.4, 179.9, 181.0], 60.0, 100.0, 200.0) == (2, 1, 0)


def test_profile_split_takes_the_innermost_frame_with_a_category() -> None:
    kernel = "Kernel.claim (kernel/store.py:10)"
    assert classify([kernel, "<method 'commit' of 'sqlite3.Connection' objects> (~:0)"]) == (
        "commit"
    )
    assert classify([kernel, "Connection.wait (psycopg/connection.py:495)"]) == "SQL/driver"
    assert classify([kernel, "dumps (json/__init__.py:231)"]) == "kernel Python"
    assert classify(["Connection._recv (billiard/connection.py:425)"]) == "idle"
    assert classify(["bump (bench/counter.py:34)", "incr (redis/commands/core.py:1)"]) == "body"
    # A Redis socket read is the broker's under kombu, not SQL.
    kombu = "Channel._brpop_read (kombu/transport/redis.py:1)"
    assert classify([kombu, "SocketBuffer._read (redis/_parsers/socket.py:64)"]) == "Celery"
    assert classify(["main (somewhere/else.py:1)"]) == "other"


def test_profile_split_names_the_kernels_own_driver_commit_and_gate_frames() -> None:
    # py-spy sees no C frame under the kernel's driver calls: the kernel's frame names them.
    attempt = "Session._attempt (kernel/transaction/session.py:131)"
    transact = "Session._transact (kernel/transaction/session.py:113)"
    sent = "send (/w/kernel/db/driver.py:145)"
    assert classify([attempt, "_first (kernel/transitions/fast_lane.py:111)", sent]) == (
        "SQL/driver"
    )
    # COMMIT sent as text by end_write, and the WAL's sync after the gate: the commit.
    assert classify([attempt, "end_write (/w/kernel/db/engine.py:286)", sent]) == "commit"
    assert classify([transact, "KeptWal.sync (/w/kernel/db/writer_gate.py:167)"]) == "commit"
    assert classify([transact, "sync_wal (/w/kernel/db/writer_gate.py:187)"]) == "commit"
    wait = "_SharedMutex._wait (/w/kernel/db/writer_gate.py:134)"
    assert classify([transact, "WriterGate.acquire (/w/kernel/db/writer_gate.py:199)", wait]) == (
        "lock wait"
    )


def test_process_tree_memory_counts_this_process() -> None:
    rss, pss = process_tree_memory(os.getpid())
    assert rss > 1_000_000 and 0 < pss <= rss
    assert process_tree_memory(2**22 + 12345) == (0, 0)  # no such process


def test_cpu_meter_counts_the_context_switches_of_the_pool_children() -> None:
    """A child that sleeps 20 times inside the meter's window switches at least 20 times."""
    import subprocess
    import sys

    script = "import sys, time\nsys.stdin.readline()\nfor _ in range(20): time.sleep(0.001)\n"
    script += "print(flush=True)\nsys.stdin.readline()\n"
    with subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdin is not None and child.stdout is not None
        meter = CpuMeter(os.getpid())
        with meter:
            child.stdin.write("go\n")
            child.stdin.flush()
            child.stdout.readline()  # its sleeps are done; it waits, alive
        child.stdin.write("end\n")
        child.stdin.flush()
    assert meter.pool_switches >= 20


def test_latency_percentiles() -> None:
    assert percentiles([float(v) for v in range(1, 102)]) == (51.0, 100.0)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_claim_and_a_settle_send_the_fewest_statements(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """PostgreSQL: no clock round trip, the events in the statements that change state, and
    a plain claim or success one statement sent alone (no BEGIN, no COMMIT); a queued
    occurrence is claimed with no read before its claim."""
    if backend == "postgres":
        url: str = request.getfixturevalue("pg_database_url")
        claim = ["WITH UPDATE+INSERT"]
        settle = ["WITH UPDATE+INSERT"]
        # A batch's success and its next claim: one statement too.
        batch = ["WITH UPDATE+INSERT+UPDATE+INSERT"]
    else:
        url = f"sqlite:///{tmp_path / 'kernel.db'}"
        claim = ["BEGIN", "UPDATE occurrences", "INSERT events", "COMMIT"]
        settle = ["BEGIN", "UPDATE occurrences", "INSERT events", "COMMIT"]
        batch = ["BEGIN", *settle[1:3], *claim[1:3], "COMMIT"]
    assert _measure(url, 4) == {"claim": claim, "settle": settle, "batch": batch}
