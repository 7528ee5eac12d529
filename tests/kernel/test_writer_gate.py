"""The SQLite writer gate lines writers up across processes and never hangs them."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kernel.db import writer_gate
from kernel.db.writer_gate import WriterGate

HOLD = """
import sys, time
from kernel.db.writer_gate import WriterGate
gate = WriterGate(sys.argv[1], timeout_s=5)
assert gate.acquire()
print("held", flush=True)
time.sleep(float(sys.argv[2]))
gate.release()
"""


def _holder(db: Path, seconds: float) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(db), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_a_second_process_waits_until_the_holder_releases(tmp_path: Path) -> None:
    holder = _holder(tmp_path / "k.db", 0.5)
    gate = WriterGate(str(tmp_path / "k.db"), timeout_s=5)
    started = time.monotonic()
    assert gate.acquire()
    waited = time.monotonic() - started
    gate.release()
    gate.close()
    holder.communicate(timeout=10)
    assert 0.3 < waited < 4


def test_a_frozen_holder_costs_at_most_the_timeout(tmp_path: Path) -> None:
    holder = _holder(tmp_path / "k.db", 30)
    try:
        gate = WriterGate(str(tmp_path / "k.db"), timeout_s=0.3)
        assert gate.acquire() is False
        # The thread lock was given back: a later attempt is not stuck behind this one.
        assert gate._thread_lock.acquire(blocking=False)
        gate._thread_lock.release()
    finally:
        holder.kill()
        holder.communicate()
    assert gate.acquire() is True
    gate.release()
    gate.close()


TRY = """
import sys
from kernel.db.writer_gate import WriterGate
gate = WriterGate(sys.argv[1], timeout_s=0.3)
print(gate.acquire())
"""


def _other_process_gets_the_gate(db: Path) -> bool:
    tried = subprocess.run(
        [sys.executable, "-c", TRY, str(db)], capture_output=True, text=True, timeout=30
    )
    return tried.stdout.strip() == "True"


def test_a_wait_given_up_never_releases_the_gate_taken_later(tmp_path: Path) -> None:
    db = tmp_path / "k.db"
    holder = _holder(db, 1.0)
    gate = WriterGate(str(db), timeout_s=0.2)
    assert gate.acquire() is False  # its blocked flock stays behind, abandoned
    holder.communicate(timeout=10)
    assert gate.acquire() is True
    time.sleep(0.2)  # the abandoned wait gets its turn and lets go of its own file
    assert not _other_process_gets_the_gate(db)
    gate.release()
    assert _other_process_gets_the_gate(db)
    gate.close()


def test_a_holder_killed_holding_the_gate_passes_it_on_at_once(tmp_path: Path) -> None:
    db = tmp_path / "k.db"
    holder = _holder(db, 30)
    holder.kill()
    holder.communicate()
    gate = WriterGate(str(db), timeout_s=30)
    started = time.monotonic()
    assert gate.acquire() is True
    assert time.monotonic() - started < 10  # not after the timeout: the mutex is robust
    assert not _other_process_gets_the_gate(db)
    gate.release()
    assert _other_process_gets_the_gate(db)
    gate.close()


def test_a_thread_waits_for_another_threads_hold_and_reentry_keeps_it(tmp_path: Path) -> None:
    gate = WriterGate(str(tmp_path / "k.db"), timeout_s=5)
    assert gate.acquire()
    assert gate.acquire()  # a retry inside the first attempt
    gate.release()
    assert not _other_process_gets_the_gate(tmp_path / "k.db")  # still held once
    got: list[float] = []

    def other() -> None:
        started = time.monotonic()
        assert gate.acquire()
        got.append(time.monotonic() - started)
        gate.release()

    waiter = threading.Thread(target=other)
    waiter.start()
    time.sleep(0.3)
    assert not got
    gate.release()
    waiter.join(timeout=10)
    assert got and got[0] >= 0.25
    assert _other_process_gets_the_gate(tmp_path / "k.db")
    gate.close()


def test_a_free_gate_is_taken_without_a_deadline(tmp_path: Path, monkeypatch: Any) -> None:
    """Each SQLite transaction takes the gate, nearly always free: the timed wait's deadline
    (a clock read and a ctypes struct) is built only when the mutex is held by another."""
    gate = WriterGate(str(tmp_path / "k.db"), timeout_s=5)

    def no_deadline(timeout_s: float, monotonic: bool) -> None:
        raise AssertionError("a deadline built for a free gate")

    monkeypatch.setattr(writer_gate, "_deadline", no_deadline)
    assert gate.acquire()
    gate.release()
    assert gate.acquire()  # released: free again
    gate.release()
    gate.close()
    holder = _holder(tmp_path / "k.db", 0.3)
    monkeypatch.undo()
    held_elsewhere = WriterGate(str(tmp_path / "k.db"), timeout_s=5)
    assert held_elsewhere.acquire()  # waited on the timed path for the other process
    held_elsewhere.release()
    held_elsewhere.close()
    holder.communicate(timeout=10)
