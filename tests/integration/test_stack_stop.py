"""The test stack's stop: a process that ignores SIGTERM is killed, and says where it was."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from integration.stack import Proc

# Ignores SIGTERM, says it is ready, then sleeps inside a function the stacks must name.
_STUBBORN = """
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
def waiting_for_nothing():
    print("ready", flush=True)
    time.sleep(60)
waiting_for_nothing()
"""


def test_a_process_killed_after_its_grace_leaves_its_stacks(tmp_path: Path) -> None:
    proc = Proc("stubborn", [sys.executable, "-c", _STUBBORN], cwd=tmp_path, env={})
    deadline = time.monotonic() + 30
    while not proc.logged("ready"):
        assert time.monotonic() < deadline and proc.popen.poll() is None, proc.log()
        time.sleep(0.05)

    proc.terminate()
    assert proc.reap(time.monotonic() + 1.0), "it ignored SIGTERM, so it was killed"
    assert proc.hang is not None and "waiting_for_nothing" in proc.hang, proc.hang
