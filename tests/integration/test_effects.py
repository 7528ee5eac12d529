"""Effects stay inside the fence: a shell job's processes never outlive its worker or its lease.

The job is a ``sleep 300`` shell job whose script appends a line (occurrence, fence,
wall time) to a ledger file every second until a stop file appears. The job's
processes are found by the ``KERNEL_OCCURRENCE_ID`` in their environment and by their
process group (the supervisor's), so "no process of the job" covers the
``sleep 300`` grandchild and the supervisor too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from integration.stack import Proc, Stack, ended, proc_stat

pytestmark = pytest.mark.long

# sleep 300 in the background, and a ledger line per second in the foreground.
_SCRIPT = (
    'sleep 300 & while [ ! -e "$2" ]; do '
    'echo "$KERNEL_OCCURRENCE_ID $KERNEL_FENCE $(date +%s.%N)" >> "$1"; sleep 1; done'
)


def shell_job(stack: Stack, job_id: str, **fields: Any) -> dict[str, Any]:
    ledger, stop = stack.root / "shell-ledger.txt", stack.root / "stop"
    return {
        "id": job_id,
        "kind": "shell",
        "queue": stack.queue,
        "payload": {"argv": ["sh", "-c", _SCRIPT, "job", str(ledger), str(stop)]},
        **fields,
    }


def ledger(stack: Stack, occurrence_id: int, fence: int | None = None) -> list[float]:
    """Wall times of the ledger lines of ``occurrence_id`` (under ``fence``), oldest first."""
    path = stack.root / "shell-ledger.txt"
    if not path.exists():
        return []
    times = []
    for row in path.read_text().splitlines():
        occ, run_fence, at = row.split()
        if int(occ) == occurrence_id and (fence is None or int(run_fence) == fence):
            times.append(float(at))
    return times


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def job_processes(occurrence_id: int, job_id: str) -> set[int]:
    """Live processes whose environment names this occurrence of this job. The job id
    too: tests on other xdist workers run their own kernels' occurrence 1 meanwhile."""
    markers = (f"KERNEL_OCCURRENCE_ID={occurrence_id}\0", f"KERNEL_JOB_ID={job_id}\0")
    found: set[int] = set()
    for pid in _pids():
        with contextlib.suppress(OSError):
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            if all(m.encode() in environ for m in markers) and not ended(pid):
                found.add(pid)
    return found


def group_of(pid: int) -> int:
    fields = proc_stat(pid)
    assert fields is not None, f"process {pid} is gone"
    return int(fields[2])


def group_members(pgid: int) -> set[int]:
    return {pid for pid in _pids() if (fields := proc_stat(pid)) and int(fields[2]) == pgid}


def parent_of(pid: int) -> int:
    fields = proc_stat(pid)
    assert fields is not None, f"process {pid} is gone"
    return int(fields[1])


def start_the_job(stack: Stack, worker_pool: str) -> tuple[Proc, int, int]:
    """A worker running the sleep-300 job: (worker, occurrence id, the job's process group)."""
    stack.use_jobs(shell_job(stack, "sleeper", lease="10s", kill_grace="1s"))
    worker = stack.start_worker("doomed", pool=worker_pool)
    stack.start_beat("beat")
    occ_id = stack.run_now("sleeper")
    stack.wait(lambda: len(ledger(stack, occ_id)) >= 2, timeout=30, what="the job's ledger")
    members = job_processes(occ_id, "sleeper")
    assert len(members) >= 2, "the script and its sleep 300 run"
    pgid = group_of(next(iter(members)))
    assert group_members(pgid) >= members
    return worker, occ_id, pgid


def assert_the_job_is_gone(stack: Stack, occ_id: int, pgid: int, killed_at: float) -> None:
    deadline = killed_at + 2.0
    while job_processes(occ_id, "sleeper") or group_members(pgid):
        alive = job_processes(occ_id, "sleeper") | group_members(pgid)
        assert time.monotonic() < deadline, f"job processes alive 2 s after the kill: {alive}"
        time.sleep(0.05)
    written = len(ledger(stack, occ_id))
    time.sleep(1.5)  # the script wrote a line every second; nothing may write any more
    assert len(ledger(stack, occ_id)) == written


@pytest.mark.parametrize(
    ("pool", "victim"),
    [("prefork", "pool child"), ("prefork", "main"), ("solo", "main")],
)
def test_a_killed_worker_takes_its_shell_job_with_it(stack: Stack, pool: str, victim: str) -> None:
    worker, occ_id, pgid = start_the_job(stack, pool)
    supervisor = pgid  # the supervisor leads the job's group; its parent ran the task
    runner = parent_of(supervisor)
    if victim == "pool child":
        assert runner != worker.pid and worker.owns(runner)
        target = runner
    else:
        assert runner == worker.pid or pool == "prefork"
        target = worker.pid
        worker.expected_exit = True

    os.kill(target, signal.SIGKILL)

    assert_the_job_is_gone(stack, occ_id, pgid, time.monotonic())


def worker_processes(proc: Proc) -> list[int]:
    """The worker's main process and its pool processes, not what they started."""
    kids: list[int] = []
    for task in Path(f"/proc/{proc.pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            kids += [int(k) for k in (task / "children").read_text().split()]
    return [proc.pid, *kids]


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_a_frozen_worker_s_shell_jobs_stop_before_its_lease_expires(stack: Stack) -> None:
    # Redis: a process frozen while it holds a filesystem-broker queue lock stalls the others.
    lease = {"lease": "6s", "kill_grace": "1s"}
    stack.use_jobs(
        shell_job(stack, "again", delivery="at-least-once", **lease),
        shell_job(stack, "once", delivery="at-most-once", **lease),
    )
    try:
        frozen = stack.start_worker("frozen", concurrency=2)
        stack.start_beat("beat")
        again, once = stack.run_now("again"), stack.run_now("once")
        for occ_id in (again, once):
            stack.wait(lambda o=occ_id: ledger(stack, o), timeout=30, what=f"{occ_id}'s ledger")
        job_of = {again: "again", once: "once"}
        groups = {o: group_of(next(iter(job_processes(o, job_of[o])))) for o in (again, once)}

        # Only the worker freezes (as in a long GC pause or a swapped-out host); its jobs do not.
        for pid in worker_processes(frozen):
            os.kill(pid, signal.SIGSTOP)
        time.sleep(0.5)  # a renewal in flight has committed or not by now
        expires = {o: stack.occurrence(o).lease_expires_at.timestamp() for o in (again, once)}
        thawed = stack.start_worker("thawed")
        # The supervisor leads each group and SIGKILLs the whole group as its last act, so
        # its death dates the group's; watching one pid keeps the sampling fine-grained.
        gone_at: dict[int, float] = {}
        while len(gone_at) < 2:
            for occ_id, pgid in groups.items():
                if occ_id not in gone_at and ended(pgid):
                    gone_at[occ_id] = time.time()
            assert time.time() < max(expires.values()) + 5, (
                f"still running: {groups.keys() - gone_at}"
            )
            time.sleep(0.01)

        for occ_id, pgid in groups.items():
            assert gone_at[occ_id] < expires[occ_id], "the group outlived the lease"
            assert not group_members(pgid) and not job_processes(occ_id, job_of[occ_id])
            assert max(ledger(stack, occ_id, fence=1)) < expires[occ_id]
        # at-least-once: reclaimed elsewhere, and the two runs never overlap.
        stack.wait(lambda: ledger(stack, again, fence=2), timeout=30, what="the reclaim's ledger")
        assert min(ledger(stack, again, fence=2)) > max(ledger(stack, again, fence=1))
        assert thawed.owns(parent_of(group_of(next(iter(job_processes(again, "again"))))))
        # at-most-once: never a second run, however alive the old process might be.
        stack.wait(
            lambda: stack.occurrence(once).status.value == "needs_adjudication",
            timeout=20,
            what="adjudication",
        )
        assert ledger(stack, once, fence=2) == []
        # Each pool process's kill timer ended it during the freeze (a zombie until the
        # frozen main process reaps it, which it may do before its SIGCONT below).
        pool = worker_processes(frozen)[1:]
        assert pool and all(map(ended, pool)), "a frozen run outlived its lease"
        for pid in worker_processes(frozen):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        (stack.root / "stop").touch()
        stack.wait(
            lambda: stack.occurrence(again).status.value == "succeeded", timeout=20, what="end"
        )
        assert ledger(stack, once, fence=2) == []
    finally:  # the reclaimed run ends, so the workers can stop
        (stack.root / "stop").touch()


def test_in_process_code_that_ignores_its_timeout_ends_its_pool_process(stack: Stack) -> None:
    # stubborn() sleeps through ctx.cancelled and Celery's soft time limit: kill_grace + 1 s
    # after the timeout the pool process exits, Celery starts another, and the lease's
    # expiry settles the run.
    stack.use_jobs(
        stack.job(
            "stuck",
            "stubborn",
            kwargs={"sleep": 60},
            lease="5s",
            timeout="1s",
            kill_grace="1s",
            max_attempts=1,
            max_lost_leases=0,  # not reclaimed: its expiry settles it
        )
    )
    worker = stack.start_worker("worker")
    stack.start_beat("beat")
    occ_id = stack.run_now("stuck")
    [run] = stack.wait(lambda: stack.ledger(occurrence_id=occ_id), timeout=30, what="the run")
    started = time.monotonic()

    stack.wait(lambda: ended(run["pid"]), timeout=10, what="the pool process to exit")
    assert time.monotonic() - started < 5
    assert worker.logged("the run did not stop within kill_grace 1.0s")
    stack.wait(
        lambda: stack.occurrence(occ_id).status.value == "dead_letter",
        timeout=20,
        what="the expired lease's dead letter",
    )
    error = stack.occurrence(occ_id).last_error
    assert error is not None and error["code"] == "POISON_PILL"
    assert worker.popen.poll() is None, "the worker itself lives on"


def test_a_run_stalled_between_its_check_and_its_effect_ends_before_its_lease_expires(
    stack: Stack,
) -> None:
    # checks_then_stalls() checks ctx.cancelled, then stalls 12 s in C code holding the GIL,
    # then writes: the chaos run's frozen worker, whose job woke past its lease between its
    # check and its write. The lease keeper cannot run (no renewal, no cancel, no exit 70);
    # the kill timer it armed at the claim ends the pool process before the lease expires.
    stall_s = 12
    stack.use_jobs(
        stack.job(
            "stalls",
            "checks_then_stalls",
            kwargs={"stall_s": stall_s},
            lease="5s",
            kill_grace="1s",
            max_attempts=1,
            max_lost_leases=0,  # not reclaimed: its expiry settles it
        )
    )
    worker = stack.start_worker("worker")
    stack.start_beat("beat")
    occ_id = stack.run_now("stalls")
    [run] = stack.wait(lambda: stack.ledger(occurrence_id=occ_id), timeout=30, what="the run")
    stalled_at = time.monotonic()
    expires = stack.occurrence(occ_id).lease_expires_at.timestamp()

    while not ended(run["pid"]):  # seen alive only before the lease's expiry
        assert time.time() < expires, "the stalled process outlived its lease"
        time.sleep(0.01)
    killed = f"pid:{run['pid']} exited with 'signal 9 (SIGKILL)'"
    stack.wait(lambda: worker.logged(killed), timeout=10, what="Celery's report of the kill")
    stack.wait(
        lambda: stack.occurrence(occ_id).status.value == "dead_letter",
        timeout=20,
        what="the expired lease's dead letter",
    )
    time.sleep(max(0.0, stalled_at + stall_s + 1 - time.monotonic()))  # the stall's end
    assert [line["event"] for line in stack.ledger(occurrence_id=occ_id)] == ["run"]
    assert worker.popen.poll() is None, "the worker itself lives on"
