"""Nothing a shell run starts outlives its lease, even if it detaches (issue 23).

The job's command starts two writers that leave it: one in a session of its own
(``setsid``), one daemonized by a double fork. Each ignores SIGTERM and appends a line to a
ledger every 0.1 s. Then the worker is killed with ``kill -9`` (its main and pool
processes, not what they started) or frozen with SIGSTOP; both writers must be gone
within the lease, on the cgroup path and on the subreaper path
(``KERNEL_CONTAINMENT=subreaper``).

When the supervisor itself is killed, nothing of it is left to kill the job: the run's
cgroup, named after its occurrence and fence, is killed and removed by whoever finds the
supervisor gone (its worker, or the next claim of the occurrence) before the run is retried
(issue 39 item 11).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from integration.stack import Proc, Stack, ended
from integration.test_effects import job_processes, worker_processes

from adapters.run_cgroup import cgroup_name
from adapters.supervisor import CGROUP, SUBREAPER, cgroup_home, containment

pytestmark = pytest.mark.long

LEASE_S = 6.0

# argv: a ledger path. Ignores SIGTERM, writes its pid to PATH.pid, appends to PATH.
_WRITER = textwrap.dedent(
    """
    import os, signal, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    open(sys.argv[1] + '.pid', 'w').write(str(os.getpid()))
    while True:
        open(sys.argv[1], 'a').write(f'{time.time()}\\n')
        time.sleep(0.1)
    """
)

# argv: ledger directory, the writer's source. Starts the two writers, then waits to be killed.
_COMMAND = textwrap.dedent(
    """
    import os, subprocess, sys, time
    where, writer = sys.argv[1], sys.argv[2]
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
        "payload": {"argv": [sys.executable, "-c", _COMMAND, str(stack.root), _WRITER]},
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


# argv: ledger directory, the writer's source. Records which writers of earlier runs it
# finds alive; the first run (fence 1) then starts one in a session of its own and waits.
# A reclaim after the lost lease runs as the same attempt, at fence 2.
_RETRIED = textwrap.dedent(
    """
    import json, os, pathlib, subprocess, sys, time
    where, writer = pathlib.Path(sys.argv[1]), sys.argv[2]
    fence = os.environ["KERNEL_FENCE"]
    alive = []
    for pidfile in sorted(where.glob("writer-*.pid")):
        try:
            stat = pathlib.Path(f"/proc/{int(pidfile.read_text())}/stat").read_text()
        except (OSError, ValueError):
            continue
        if stat.rpartition(")")[2].split()[0] not in ("Z", "X"):
            alive.append(pidfile.name)
    (where / f"seen-{fence}.json").write_text(json.dumps(alive))
    if fence != "1":
        sys.exit(0)
    subprocess.Popen(
        [sys.executable, "-c", writer, str(where / "writer-1")], start_new_session=True
    )
    while True:
        time.sleep(1)
    """
)


def _supervisor_of(worker: Proc) -> int:
    found = [
        pid
        for pid in worker.children()
        if b"supervisor.py" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    assert len(found) == 1, f"supervisors of {worker.name}: {found}"
    return found[0]


@pytest.mark.parametrize("stack", ["redis"], indirect=True)  # SIGSTOP: not filesystem
@pytest.mark.parametrize("killed", ["supervisor", "supervisor and worker"])
def test_a_killed_supervisor_s_job_is_gone_before_the_retry(stack: Stack, killed: str) -> None:
    if containment()[0] != CGROUP:
        pytest.skip(f"this host gives no cgroup: {containment()[1]}")
    stack.use_jobs(
        {
            "id": "retried",
            "kind": "shell",
            "queue": stack.queue,
            "lease": f"{LEASE_S:g}s",
            "kill_grace": "1s",
            "max_attempts": 2,
            "retry": {"backoff": "0.1s", "jitter": 0},
            "payload": {"argv": [sys.executable, "-c", _RETRIED, str(stack.root), _WRITER]},
        }
    )
    worker = stack.start_worker("worker")
    stack.start_beat("beat")
    occ_id = stack.run_now("retried")
    ledger = stack.root / "writer-1"
    stack.wait(
        lambda: ledger.exists() and len(ledger.read_text().splitlines()) >= 2,
        timeout=30,
        what="the detached writer",
    )
    writer = int((stack.root / "writer-1.pid").read_text())
    supervisor = _supervisor_of(worker)
    home = cgroup_home()
    assert home is not None
    cgroup = home / cgroup_name(stack.occurrence(occ_id))
    assert writer in map(int, (cgroup / "cgroup.procs").read_text().split())
    try:
        if killed == "supervisor":
            os.kill(supervisor, signal.SIGKILL)
        else:  # both at once, as the OOM killer or a container stop might: nobody is left
            victims = worker_processes(worker)
            worker.expected_exit = True
            for pid in victims:
                os.kill(pid, signal.SIGSTOP)
            os.kill(supervisor, signal.SIGKILL)
            for pid in victims:
                os.kill(pid, signal.SIGKILL)
            stack.start_worker("next")
        stack.wait(lambda: stack.settled("retried"), timeout=60, what="the retry")

        assert stack.occurrence(occ_id).status == "succeeded"
        assert json.loads((stack.root / "seen-2.json").read_text()) == [], (
            "the retry ran beside its predecessor's detached writer"
        )
        assert ended(writer)
        assert not cgroup.exists()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(writer, signal.SIGKILL)
