"""Helpers shared by the CLI tests (fixtures live in ``conftest.py``)."""

from __future__ import annotations

import queue
import signal
import subprocess
import threading
from pathlib import Path
from typing import IO, Any

from process_stacks import python_stacks, signal_state

from kernel import Kernel

__all__ = ["Lines", "define", "job", "stop", "write"]


def write(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` and return the path."""
    path.write_text(text, encoding="utf-8")
    return path


def job(job_id: str, **fields: Any) -> dict[str, Any]:
    """A valid ``callable`` job spec with ``fields`` on top."""
    return {
        "id": job_id,
        "kind": "callable",
        "payload": {"callable": "os.path:join", "args": ["a"]},
        "schedule": {"every": "60s"},
        **fields,
    }


def define(kernel: Kernel, job_id: str, **fields: Any) -> None:
    """Define a job directly in the kernel."""
    kernel.define_job(job(job_id, **fields))


class Lines:
    """The lines a child process writes to ``stream``, read in a thread so a test can wait
    for the next one with a timeout instead of hanging on a silent child."""

    def __init__(self, stream: IO[str]) -> None:
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: IO[str]) -> None:
        for line in iter(stream.readline, ""):
            self._lines.put(line)

    def next(self, timeout: float = 45.0) -> str:
        """The next line; raises ``queue.Empty`` if none comes within ``timeout`` seconds."""
        return self._lines.get(timeout=timeout)


def stop(proc: subprocess.Popen[str], signum: signal.Signals, timeout: float = 10) -> int:
    """Send ``signum`` to a spawned command and return its exit code; one still running after
    ``timeout`` fails the test with its signal state and Python stacks, then is killed."""
    proc.send_signal(signum)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        state, stacks = signal_state(proc.pid), python_stacks([proc.pid])
        proc.kill()
        _, err = proc.communicate(timeout=10)
        raise AssertionError(
            f"{proc.args!r} still running {timeout:g} s after {signum.name}\n"
            f"{state}\n{stacks}\nstderr:\n{err}"
        ) from None
