"""Nothing a shell run starts outlives its lease, even if it detaches (issue 23).

The job's command starts two writers that leave it: one in a session of its own
(``setsid``), one daemonized by a double fork. Each ignores SIGTERM and appends a line to a
ledger every 0.1 s. Then the worker is killed with ``kill -9`` (its main and pool
processes, not what they started) or frozen with SIGSTOP; both writers must be gone
within the lease, on the cgroup path and on the subreaper path
(``KERNEL_CONTAINMENT=subreaper``).
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from integration.stack import Stack, ended
from integration.test_effects import job_processes, worker_processes

from adapters.supervisor import CGROUP, SUBREAPER, containment

pytestmark = pytest.mark.long

LEASE_S = 6.0

# argv: ledger directory. Starts the two writers, then waits to be killed.
_COMMAND = textwrap.dedent(
    """
    import os, subprocess, sys, time
    where = sys.argv[1]
    writer = (
        "import os, signal, sys, time\\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
        "open(sys.argv[1] + '.pid', 'w').write(str(os.getpid()))\\n"
        "while True:\\n"
        "    open(sys.argv[1], 'a').write(f'{time.time()}\\\\n')\\n"
        "    time.sleep(0.1)\\n"
    )
    subprocess.Popen([sys.executable, "-c", writer, where + "/setsid"], start_new_session=True)
    if os.fork() == 0:  # the classic daemon: fork, setsid, fork again, the middle one exits
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", writer, where + "/daemon"])
        os._exit(0)
    while True:
        time.sleep(1)
    """
)
WRITERS = ("setsid", "daemon")


def _writers(root: Path) -> dict[str, int]:
    """The writers' pids, of those that wrote theirs (a file just created is empty)."""
    written = {n: (root / f"{n}.pid").read_text() for n in WRITERS if (root / f"{n}.pid").exists()}
    return {name: int(pid) for name, pid in written.items() if pid.strip()}


def _lines(root: Path) -> int:
    return sum(len((root / n).read_text().splitlines()) for n in WRITERS if (root / n).exists())


def _job(stack: Stack) -> dict[str, Any]:
    return {
        "id": "detacher",
        "kind": "shell",
        "queue": stack.queue,
        "lease": f"{LEASE_S:g}s",
        "kill_grace": "1s",
        "payload": {"argv": [sys.executable, "-c", _COMMAND, str(stack.root)]},
    }


@pytest.mark.parametrize("stack", ["redis"], indirect=True)  # a frozen worker: not filesystem
@pytest.mark.parametrize("mode", [CGROUP, SUBREAPER])
@pytest.mark.parametrize("fault", ["kill -9", "SIGSTOP"])
def test_detached_grandchildren_stop_within_the_lease(stack: Stack, mode: str, fault: str) -> None:
    if mode == CGROUP and containment()[0] != CGROUP:
        pytest.skip(f"this host gives no cgroup: {containment()[1]}")
    if mode == SUBREAPER:
        stack.env["KERNEL_CONTAINMENT"] = SUBREAPER
    stack.use_jobs(_job(stack))
    worker = stack.start_worker("worker")
    assert worker.logged(f"shell runs contained by {mode}")
    stack.start_beat("beat")
    occ_id = stack.run_now("detacher")
    stack.wait(
        lambda: len(_writers(stack.root)) == 2 and _lines(stack.root) >= 4,
        timeout=30,
        what="both detached writers",
    )
    pids = _writers(stack.root)
    assert all(pid in job_processes(occ_id, "detacher") for pid in pids.values())

    victims = worker_processes(worker)
    worker.expected_exit = True
    for pid in victims:
        os.kill(pid, signal.SIGKILL if fault == "kill -9" else signal.SIGSTOP)
    struck = time.time()
    expires = stack.occurrence(occ_id).lease_expires_at.timestamp()
    try:
        while not all(map(ended, pids.values())):
            assert time.time() < expires, (
                f"{fault}, {mode}: still alive at the lease's expiry: "
                f"{ {n: p for n, p in pids.items() if not ended(p)} }"
            )
            time.sleep(0.02)
        gone = time.time()
        written = _lines(stack.root)
        time.sleep(0.5)
        assert _lines(stack.root) == written, "a writer still writes"
        assert gone - struck < LEASE_S
    finally:
        if fault == "SIGSTOP":
            for pid in victims:
                os.kill(pid, signal.SIGCONT)
