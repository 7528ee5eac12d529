"""A host-wide queue for SQLite writers, so contention waits without SQLite's sleeps.

SQLite makes a writer that finds the database locked sleep in steps of 1, 2, 5,
10 ms and retry; with two worker processes claiming and settling back to back,
those sleeps, not the work, set the pace. Taking an ``flock`` on a file beside
the database first lines writers up in the operating system, which wakes the
next one the moment the lock is released. Correctness still rests on SQLite's
own lock (``BEGIN IMMEDIATE``): the gate only decides who asks first.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time

__all__ = ["WriterGate"]

# Poll instead of blocking forever: a writer frozen while holding the gate (SIGSTOP)
# must not hang the others past the busy timeout SQLite would have applied.
_POLL_S = 0.0002


class WriterGate:
    """One per Kernel: a thread lock plus an ``flock`` on ``<database>.writer-lock``."""

    def __init__(self, database_path: str, timeout_s: float) -> None:
        self.path = f"{database_path}.writer-lock"
        self.timeout_s = timeout_s
        # Re-entrant: a write retried on a fresh connection runs inside the first attempt.
        self._thread_lock = threading.RLock()
        self._fd: int | None = None
        self._pid = 0

    def _file(self) -> int:
        # A forked child shares its parent's open file (and so its lock): open its own.
        if self._fd is None or self._pid != os.getpid():
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            self._pid = os.getpid()
        return self._fd

    def acquire(self) -> bool:
        """Wait for the gate; False after the timeout (the caller then goes on without it)."""
        if not self._thread_lock.acquire(timeout=self.timeout_s):
            return False
        try:
            fd = self._file()
        except OSError:  # no room or no write access beside the database: SQLite alone decides
            self._thread_lock.release()
            return False
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    self._thread_lock.release()
                    return False
                time.sleep(_POLL_S)

    def close(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = None

    def release(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._thread_lock.release()
