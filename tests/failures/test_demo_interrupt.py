"""Ctrl-C on ``python -m celery_app.demo``: exit 130, no traceback, no child left running.

SIGINT goes to the whole process group, as a terminal sends it. Interrupted early (while
its worker and Beat start), so twenty runs stay cheap; the delay varies per run so the
interrupt lands before, while and after the children start.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from failures.support import clean_env


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ", 1)[1][0] != "Z"


def _interrupt_once(root: Path, attempt: int) -> None:
    cwd = root / f"run-{attempt}"
    cwd.mkdir()
    out = cwd / "demo.out"
    with out.open("wb") as sink:
        demo = subprocess.Popen(
            [sys.executable, "-m", "celery_app.demo", "--seconds", "30"],
            cwd=cwd,
            env=clean_env(),
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 30
        while "started beat" not in out.read_text() and demo.poll() is None:
            assert time.monotonic() < deadline, out.read_text()
            time.sleep(0.02)
        time.sleep((attempt % 4) * 0.25)
        os.killpg(demo.pid, signal.SIGINT)
        code = demo.wait(timeout=30)
    finally:  # whatever is left of the group this test started
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(demo.pid, signal.SIGKILL)
        demo.wait()
    text = out.read_text()
    assert code == 130, text
    assert "Traceback" not in text, text
    assert "interrupted: stopping the worker and Beat" in text
    pids = [int(p) for p in re.findall(r"started \w+ \(pid (\d+)\)", text)]
    assert len(pids) == 2 and not [pid for pid in pids if _alive(pid)], text
    assert "worker stopped" in text and "beat stopped" in text


@pytest.mark.timeout(300)
def test_ctrl_c_ends_the_demo_and_its_children_every_time(tmp_path: Path) -> None:
    # Two at a time: most of each run is Python starting three processes.
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda attempt: _interrupt_once(tmp_path, attempt), range(20)))
