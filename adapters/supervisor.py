"""The supervisor between a worker and a shell job: nothing the job starts outlives its lease.

Started by the shell adapter as ``python -I -S supervisor.py GRACE CWD MODE CGROUP -- ARGV...``
in a session of its own. It starts the command and obeys a socket on its stdin, whose other
end only the worker holds. The first line is the command's environment as a JSON object
(the supervisor itself runs with an empty one, so nothing of it, not even Python's locale
coercion, reaches the command); then:

* ``deadline T`` (a ``time.monotonic()`` value; the clock is the host's): SIGTERM the
  job at ``T - GRACE`` and SIGKILL it at ``T`` unless a later deadline arrives first;
* ``stop``: SIGTERM the job now, SIGKILL it ``GRACE`` seconds later;
* end of file (the worker died, even by SIGKILL, or was replaced): as ``stop``.

"The job" is every process the command started, including those that left its process
group and session (``setsid``), double-forked or daemonized. Two ways to find them all
(:func:`containment` says which the host allows; ``MODE`` ``subreaper`` forces the second):

* ``cgroup``: the command runs in a cgroup v2 of its own, named ``CGROUP`` and made under
  the supervisor's, and is killed with ``cgroup.kill``, which no process in it can escape.
  The name says whose run it is, so that whoever finds this supervisor gone (killed before
  it could act) can kill and remove what it leaves (:func:`remove_cgroup`);
* ``subreaper``: the supervisor is a child subreaper (``PR_SET_CHILD_SUBREAPER``), so an
  orphaned descendant is re-parented to it rather than to init, and it kills every
  descendant it finds in ``/proc`` until none is left.

So the job dies with the worker, and a frozen worker (SIGSTOP, swapped out) that cannot
renew its lease cannot keep its job running either. When the command ends, the
supervisor kills what is left of the job, then writes one JSON line back on the socket
(``{"returncode": n, "containment": MODE}``, negative for a signal, or
``{"spawn_error": ...}``). Standard library only, and no site packages, so it starts quickly.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["CGROUP", "SUBREAPER", "cgroup_home", "containment", "remove_cgroup"]

CGROUP = "cgroup"
SUBREAPER = "subreaper"
_CONTROL = 0
_TICK_S = 0.05
_PR_SET_CHILD_SUBREAPER = 36
#: Rounds of "find every descendant, SIGKILL it" before giving up on a fork bomb.
_KILL_ROUNDS = 50
#: How long :func:`remove_cgroup` keeps killing and trying to remove before it gives up.
_REMOVE_S = 2.0


def containment(forced: str | None = None) -> tuple[str, str]:
    """How shell runs are contained on this host: (``cgroup`` or ``subreaper``, why).

    ``cgroup`` where this process's cgroup v2 lets it make a child cgroup that has
    ``cgroup.kill`` (Linux 5.14+, a writable delegated cgroup); else ``subreaper``.
    ``forced`` ``subreaper`` skips the cgroup.
    """
    if forced == SUBREAPER:
        return SUBREAPER, "forced (KERNEL_CONTAINMENT=subreaper)"
    home = cgroup_home()
    if home is None:
        return SUBREAPER, "no writable cgroup v2 for this process"
    probe = home / f"kernel-probe-{os.getpid()}-{time.monotonic_ns()}"
    try:
        probe.mkdir()
    except OSError as exc:
        return SUBREAPER, f"cannot make a cgroup under {home}: {exc.strerror}"
    try:
        if not (probe / "cgroup.kill").exists():
            return SUBREAPER, f"no cgroup.kill under {home} (Linux before 5.14)"
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()
    return CGROUP, f"a cgroup v2 per run under {home}, killed with cgroup.kill"


def cgroup_home() -> Path | None:
    """The directory of this process's cgroup v2, when it may be written."""
    try:
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
        groups = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    mount = next(
        (line.split()[4] for line in mounts if line.partition(" - ")[2].startswith("cgroup2 ")),
        None,
    )
    path = next((line[3:] for line in groups if line.startswith("0::")), None)
    if mount is None or path is None:
        return None
    home = Path(mount + path.rstrip("/"))
    return home if os.access(home, os.W_OK) and (home / "cgroup.procs").exists() else None


def remove_cgroup(cgroup: Path) -> bool:
    """Kill every process in ``cgroup`` and the cgroups under it, then remove them all.

    ``cgroup.kill`` where the kernel has it, and SIGKILL to each process listed in a
    ``cgroup.procs`` in any case, until the directories can be removed (an exited process
    leaves its cgroup at once, reaped or not). Returns whether nothing of ``cgroup`` is
    left: False when some process would not die within 2 s or may not be signalled.
    """
    deadline = time.monotonic() + _REMOVE_S
    while True:
        groups = [Path(d) for d, _, _ in os.walk(cgroup, topdown=False)]  # deepest first
        if not groups:
            return True
        with contextlib.suppress(OSError):
            (cgroup / "cgroup.kill").write_text("1")
        for group in groups:
            for pid in _cgroup_procs(group):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                group.rmdir()
        if not cgroup.exists():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def _cgroup_procs(cgroup: Path) -> list[int]:
    try:
        return [int(pid) for pid in (cgroup / "cgroup.procs").read_text().split()]
    except OSError:  # removed meanwhile
        return []


class _Job:
    """Every process the command started, and how to signal them all."""

    def __init__(self, mode: str, name: str) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # in both modes: orphans come to us
        self.cgroup: Path | None = None
        if mode == CGROUP:
            home = cgroup_home()
            with contextlib.suppress(OSError):
                if home is not None:
                    (home / name).mkdir()
                    self.cgroup = home / name
        self.mode = CGROUP if self.cgroup is not None else SUBREAPER
        #: The command, whose exit status Popen collects: never reaped here.
        self.command_pid: int | None = None

    def enter(self) -> None:
        """In the command's process before exec: join the run's cgroup (should that fail,
        the subreaper still finds it)."""
        if self.cgroup is not None:
            with contextlib.suppress(OSError):
                (self.cgroup / "cgroup.procs").write_text("0")

    def signal(self, sig: int) -> None:
        """``sig`` to every process of the job (not the supervisor)."""
        if self.cgroup is not None and sig == signal.SIGKILL:
            with contextlib.suppress(OSError):
                (self.cgroup / "cgroup.kill").write_text("1")
        for pid in self._members():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def kill(self) -> None:
        """SIGKILL every process of the job until none is left; reap what comes to us."""
        for _ in range(_KILL_ROUNDS):
            self.signal(signal.SIGKILL)
            reap(self.command_pid)
            if not self._members():
                break
            time.sleep(0.01)

    def close(self) -> None:
        """Remove the run's cgroup once the job is dead (should that fail, the worker
        tries again, and so does the next claim of the run)."""
        if self.cgroup is not None:
            remove_cgroup(self.cgroup)

    def _members(self) -> list[int]:
        """Living processes of the job: in its cgroup, and every descendant of ours."""
        pids = set(_descendants(os.getpid()))
        if self.cgroup is not None:
            pids.update(_cgroup_procs(self.cgroup))
        pids.discard(os.getpid())
        return sorted(pids)


def _descendants(root: int) -> list[int]:
    """Living (not zombie) descendants of ``root``, from ``/proc``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        state, ppid = stat.rpartition(")")[2].split()[:2]
        if state not in ("Z", "X"):
            children.setdefault(int(ppid), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def reap(keep: int | None) -> None:
    """Reap exited orphans re-parented to us (a subreaper); never ``keep`` (the command,
    whose exit status Popen collects)."""
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None or info.si_pid == keep:
            return
        with contextlib.suppress(ChildProcessError):
            os.waitpid(info.si_pid, 0)


def main(argv: list[str]) -> None:
    grace, cwd, mode, name, command = float(argv[1]), argv[2] or None, argv[3], argv[4], argv[6:]
    stop_requested: list[bool] = []
    # A handler, not SIG_IGN: ignored signals stay ignored across exec, handlers do not.
    signal.signal(signal.SIGTERM, lambda *_: stop_requested.append(True))
    first, _, pending = _read_line(b"")
    job = _Job(mode, name)
    try:
        env = json.loads(first)
        child = subprocess.Popen(
            command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, preexec_fn=job.enter
        )
    except OSError as exc:
        job.close()
        missing = "working directory" if cwd is not None and exc.filename == cwd else "executable"
        _report({"spawn_error": {"what": missing, "errno": exc.errno, "strerror": exc.strerror}})
        return
    job.command_pid = child.pid
    kill_at: float | None = None
    term_sent = False
    worker_gone = False
    while child.poll() is None:
        reap(child.pid)  # orphans that exited: no zombies pile up under a long run
        *lines, pending = pending.split(b"\n")
        for line in lines:
            word, _, value = line.decode().partition(" ")
            if word == "stop":
                stop_requested.append(True)
            elif word == "deadline" and not term_sent:
                kill_at = float(value)
        now = time.monotonic()
        if stop_requested:
            stop_requested.clear()
            kill_at = min(kill_at or now + grace, now + grace)
        if kill_at is not None and now >= kill_at:
            job.kill()
        if kill_at is not None and now >= kill_at - grace and not term_sent:
            term_sent = True
            job.signal(signal.SIGTERM)
        if worker_gone or not select.select([_CONTROL], [], [], _TICK_S)[0]:
            time.sleep(_TICK_S if worker_gone else 0)
            continue
        data = os.read(_CONTROL, 4096)
        if not data:  # the worker is gone: nobody renews the lease any more
            worker_gone = True
            stop_requested.append(True)
        pending += data
    job.command_pid = None
    job.kill()  # leftovers of the command would hold the output pipes, or act on
    job.close()
    _report({"returncode": child.returncode, "containment": job.mode})


def _read_line(pending: bytes) -> tuple[bytes, bytes, bytes]:
    while b"\n" not in pending:
        data = os.read(_CONTROL, 65536)
        if not data:
            raise SystemExit(0)  # the worker died before it said what to run
        pending += data
    return pending.partition(b"\n")


def _report(message: dict[str, object]) -> None:
    with contextlib.suppress(OSError):  # the worker is gone; nobody is listening
        os.write(_CONTROL, (json.dumps(message) + "\n").encode())


if __name__ == "__main__":
    main(sys.argv)
