"""What a process that would not stop was doing: its Python stacks and its signal state.

Used where a test waits for a process it asked to stop, so that an intermittent hang says
why the first time it happens.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

__all__ = ["python_stacks", "signal_state"]


def python_stacks(pids: Iterable[int]) -> str:
    """``py-spy dump --locals`` of each process (a hang's cause is often in the locals: a
    count awaited, the job held)."""
    spy = shutil.which("py-spy", path=Path(sys.executable).parent) or shutil.which("py-spy")
    if spy is None:
        return "(no py-spy on PATH or beside the interpreter: no stacks)"
    dumps = []
    for pid in pids:
        try:
            done = subprocess.run(
                [spy, "dump", "--locals", "--pid", str(pid)],
                capture_output=True,
                text=True,
                timeout=30,
            )
            dumps.append(done.stdout if done.returncode == 0 else f"{pid}: {done.stderr}")
        except subprocess.TimeoutExpired:
            dumps.append(f"{pid}: py-spy dump did not answer within 30 s")
    return "\n".join(dumps)


def signal_state(pid: int) -> str:
    """The kernel's view of ``pid``'s signals: pending, blocked, ignored, caught (hex masks,
    bit N-1 for signal N; an inherited ignored SIGINT shows as bit 1 of ``SigIgn``)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError as exc:
        return f"{pid}: no /proc status ({exc.strerror})"
    return "\n".join(line for line in status.splitlines() if line.startswith(("Sig", "ShdPnd")))
