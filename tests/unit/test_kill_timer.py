"""The kill timer ends its process at the deadline, whatever the process is doing.

Each case runs in a child process (the timer's signal is SIGKILL): the child arms its
timer, says so on stdout, then spins holding the GIL, as job code in C would.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from celery_app.kill_timer import KillTimer

ROOT = Path(__file__).resolve().parents[2]

_CHILD = """
import sys, time
from celery_app.kill_timer import KillTimer

timer = KillTimer.create()
for step in sys.argv[1:]:  # "arm:<seconds from now>" or "disarm", in order
    if step == "disarm":
        timer.disarm()
    else:
        timer.arm(time.monotonic() + float(step.split(":")[1]))
print("armed", flush=True)
started = time.monotonic()
while time.monotonic() - started < 4.0:
    pass
print("survived", flush=True)
"""


def _timers() -> bool:
    try:
        KillTimer.create()
    except OSError:
        return False
    return True


pytestmark = pytest.mark.skipif(not _timers(), reason="no POSIX timers here")


def _child(*steps: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, *steps],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        stdout=subprocess.PIPE,
        text=True,
    )


def _ended(child: subprocess.Popen[str]) -> tuple[int, float, list[str]]:
    """(exit status, seconds from now until it ended, the lines it printed)."""
    started = time.monotonic()
    status = child.wait(timeout=10)
    after = time.monotonic() - started
    assert child.stdout is not None
    with child.stdout:
        return status, after, child.stdout.read().split()


def test_a_stopped_process_is_killed_at_its_deadline() -> None:
    child = _child("arm:1.0")
    assert child.stdout is not None and child.stdout.readline().strip() == "armed"
    os.kill(child.pid, signal.SIGSTOP)  # as a frozen worker: nothing of its own can run
    status, after, _ = _ended(child)
    assert status == -signal.SIGKILL
    assert after < 2.0


def test_a_busy_process_is_killed_at_its_deadline_and_not_before() -> None:
    started = time.monotonic()
    status, _, printed = _ended(_child("arm:1.5"))
    assert (status, printed) == (-signal.SIGKILL, ["armed"])
    assert 1.4 < time.monotonic() - started < 3.0


def test_rearming_moves_the_deadline_and_disarming_cancels_it() -> None:
    started = time.monotonic()
    status, _, _ = _ended(_child("arm:0.3", "arm:2.0"))
    assert status == -signal.SIGKILL and time.monotonic() - started > 1.9
    assert _ended(_child("arm:0.3", "disarm"))[::2] == (0, ["armed", "survived"])


def test_a_deadline_already_passed_kills_at_once() -> None:
    status, _, printed = _ended(_child("arm:-5"))
    assert (status, printed) == (-signal.SIGKILL, [])


@pytest.mark.parametrize("skew", ["+300s", "-300s"])
def test_a_skewed_wall_clock_does_not_move_the_deadline(skew: str) -> None:
    # The chaos run's skewed hosts: libfaketime moves an absolute timer by the skew.
    library = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))
    if not library:
        pytest.skip("libfaketime is not installed")
    env = {"LD_PRELOAD": library[0], "FAKETIME": skew, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    started = time.monotonic()
    status, _, printed = _ended(_child("arm:1.5", env=env))
    assert (status, printed) == (-signal.SIGKILL, ["armed"])
    assert 1.4 < time.monotonic() - started < 3.0
