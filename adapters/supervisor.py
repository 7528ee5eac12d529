"""The supervisor between a worker and a shell job: the job's group never outlives its lease.

Started by the shell adapter as ``python -I -S supervisor.py GRACE CWD -- ARGV...`` in a
session of its own, so its process group is the job's. It starts the command in that
group and obeys a socket on its stdin, whose other end only the worker holds. The first
line is the command's environment as a JSON object (the supervisor itself runs with an
empty one, so nothing of it, not even Python's locale coercion, reaches the command);
then:

* ``deadline T`` (a ``time.monotonic()`` value; the clock is the host's): SIGTERM the
  group at ``T - GRACE`` and SIGKILL it at ``T`` unless a later deadline arrives first;
* ``stop``: SIGTERM the group now, SIGKILL it ``GRACE`` seconds later;
* end of file (the worker died, even by SIGKILL, or was replaced): as ``stop``.

So the group dies with the worker, and a frozen worker (SIGSTOP, swapped out) that
cannot renew its lease cannot keep its job running either. When the command ends, the
supervisor writes one JSON line back on the socket (``{"returncode": n}``, negative for
a signal, or ``{"spawn_error": ...}``) and kills whatever is left of the group,
itself included. Standard library only, and no site packages, so it starts quickly.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time

_CONTROL = 0
_TICK_S = 0.05


def main(argv: list[str]) -> None:
    grace, cwd, command = float(argv[1]), argv[2] or None, argv[4:]
    stop_requested: list[bool] = []
    # A handler, not SIG_IGN: ignored signals stay ignored across exec, handlers do not.
    signal.signal(signal.SIGTERM, lambda *_: stop_requested.append(True))
    first, _, pending = _read_line(b"")
    try:
        env = json.loads(first)
        child = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL)
    except OSError as exc:
        missing = "working directory" if cwd is not None and exc.filename == cwd else "executable"
        _report({"spawn_error": {"what": missing, "errno": exc.errno, "strerror": exc.strerror}})
        return
    kill_at: float | None = None
    term_sent = False
    worker_gone = False
    while child.poll() is None:
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
            os.killpg(0, signal.SIGKILL)
        if kill_at is not None and now >= kill_at - grace and not term_sent:
            term_sent = True
            os.killpg(0, signal.SIGTERM)  # our own handler only notes it
        if worker_gone or not select.select([_CONTROL], [], [], _TICK_S)[0]:
            time.sleep(_TICK_S if worker_gone else 0)
            continue
        data = os.read(_CONTROL, 4096)
        if not data:  # the worker is gone: nobody renews the lease any more
            worker_gone = True
            stop_requested.append(True)
        pending += data
    _report({"returncode": child.returncode})
    os.killpg(0, signal.SIGKILL)  # leftovers of the command would hold the output pipes


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
