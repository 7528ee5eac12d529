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


def _armed(child: subprocess.Popen[str]) -> float:
    """When the child's first line ("armed": its timer is set) was read."""
    assert child.stdout is not None and child.stdout.readline().strip() == "armed"
    return time.monotonic()


def _ended(child: subprocess.Popen[str]) -> tuple[int, list[str]]:
    """(exit status, the lines it printed that were not read yet)."""
    status = child.wait(timeout=10)
    assert child.stdout is not None
    with child.stdout:
        return status, child.stdout.read().split()


def _killed_on_time(deadline_s: float, env: dict[str, str] | None = None) -> None:
    """A child armed ``deadline_s`` ahead is killed then: not before (counted from before it
    started, so never late), and soon after (counted from its "armed", so never early)."""
    started = time.monotonic()
    child = _child(f"arm:{deadline_s}", env=env)
    armed_at = _armed(child)
    assert _ended(child) == (-signal.SIGKILL, [])
    assert time.monotonic() - started > deadline_s
    assert time.monotonic() - armed_at < deadline_s + 2.0


def test_a_stopped_process_is_killed_at_its_deadline() -> None:
    child = _child("arm:1.0")
    armed_at = _armed(child)
    os.kill(child.pid, signal.SIGSTOP)  # as a frozen worker: nothing of its own can run
    assert _ended(child)[0] == -signal.SIGKILL
    assert time.monotonic() - armed_at < 3.0


def test_a_busy_process_is_killed_at_its_deadline_and_not_before() -> None:
    _killed_on_time(1.5)


def test_rearming_moves_the_deadline_and_disarming_cancels_it() -> None:
    started = time.monotonic()
    assert _ended(_child("arm:0.3", "arm:2.0")) == (-signal.SIGKILL, ["armed"])
    assert time.monotonic() - started > 2.0
    assert _ended(_child("arm:0.3", "disarm")) == (0, ["armed", "survived"])


def test_a_deadline_already_passed_kills_at_once() -> None:
    assert _ended(_child("arm:-5")) == (-signal.SIGKILL, [])


@pytest.mark.parametrize("skew", ["+300s", "-300s"])
def test_a_skewed_wall_clock_does_not_move_the_deadline(skew: str) -> None:
    # The chaos run's skewed hosts: libfaketime moves an absolute timer by the skew.
    library = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))
    if not library:
        pytest.skip("libfaketime is not installed")
    env = {"LD_PRELOAD": library[0], "FAKETIME": skew, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    _killed_on_time(1.5, env)
