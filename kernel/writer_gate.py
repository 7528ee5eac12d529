"""A host-wide queue for SQLite writers, so contention waits without SQLite's sleeps.

SQLite makes a writer that finds the database locked sleep in steps of 1, 2, 5,
10 ms and retry; with two worker processes claiming and settling back to back,
those sleeps, not the work, set the pace. Taking an ``flock`` on a file beside
the database first lines writers up in the operating system, which wakes the
next one the moment the lock is released. Correctness still rests on SQLite's
own lock (``BEGIN IMMEDIATE``): the gate only decides who asks first.

Without the gate, writers that find the lock free take it again and again, which
is faster (kernel pairs/s at 2 and 4 processes 12-45 % higher, session 5) but not
fair: on a loaded 2-core CI machine one of tests/kernel/test_race.py's four
processes waited past SQLite's busy timeout and failed with SQLITE_BUSY.
"""

from __future__ import annotations

import fcntl
import os
import queue
import threading

from kernel.process_id import current_pid

__all__ = ["WriterGate"]


class _Wait:
    """One blocked ``flock`` on its own open file, so that the caller can give up.

    ``flock`` has no timeout: the process's waiter thread blocks in it for the
    caller. A caller that gives up leaves the wait to the thread, which closes the
    file once the lock comes, releasing it. An abandoned wait owns its file
    (``flock`` locks belong to the open file), so it can never release a lock a
    later wait of this process was granted.
    """

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        self.granted = threading.Event()
        self._decided = threading.Lock()
        self._abandoned = False

    def block(self) -> None:
        """In the waiter thread: take the lock, or close the file if the caller left."""
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError:
            os.close(self.fd)
            return
        with self._decided:
            if self._abandoned:
                os.close(self.fd)
                return
            self.granted.set()

    def result(self, timeout_s: float) -> int | None:
        """The file holding the lock, or None after ``timeout_s`` (the wait is abandoned)."""
        if self.granted.wait(timeout_s):
            return self.fd
        with self._decided:
            if self.granted.is_set():
                return self.fd
            self._abandoned = True
        return None


class _Waiter:
    """The process's one thread that blocks in ``flock`` for callers, one wait at a time
    (a thread per wait cost more CPU than the polling it replaced)."""

    def __init__(self) -> None:
        self.pid = current_pid()
        self.waits: queue.SimpleQueue[_Wait] = queue.SimpleQueue()
        threading.Thread(target=self._loop, name="writer-gate", daemon=True).start()

    def _loop(self) -> None:
        while True:
            self.waits.get().block()


_waiter: _Waiter | None = None
_waiter_lock = threading.Lock()


def _wait_for(path: str, timeout_s: float) -> int | None:
    global _waiter
    with _waiter_lock:
        if _waiter is None or _waiter.pid != current_pid():  # threads do not survive a fork
            _waiter = _Waiter()
        waiter = _waiter
    wait = _Wait(path)
    waiter.waits.put(wait)
    return wait.result(timeout_s)


class WriterGate:
    """One per Kernel: a thread lock plus an ``flock`` on ``<database>.writer-lock``.

    Uncontended, the gate costs one non-blocking ``flock``. Contended, the caller
    blocks (no polling) until the holder releases, or for at most ``timeout_s``: a
    writer frozen while holding the gate (SIGSTOP) must not hang the others past
    the busy timeout SQLite would have applied.
    """

    def __init__(self, database_path: str, timeout_s: float) -> None:
        self.path = f"{database_path}.writer-lock"
        self.timeout_s = timeout_s
        # Re-entrant: a write retried on a fresh connection runs inside the first attempt.
        self._thread_lock = threading.RLock()
        self._fd: int | None = None
        self._pid = 0

    def _file(self) -> int:
        # A forked child shares its parent's open file (and so its lock): open its own.
        if self._fd is None or self._pid != current_pid():
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            self._pid = current_pid()
        return self._fd

    def acquire(self) -> bool:
        """Wait for the gate; False after the timeout (the caller then goes on without it)."""
        if not self._thread_lock.acquire(timeout=self.timeout_s):
            return False
        try:
            fd = self._file()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                pass
            # Held elsewhere: block on a fresh open file, which becomes the gate's.
            granted = _wait_for(self.path, self.timeout_s)
        except OSError:  # no room or no write access beside the database: SQLite alone decides
            self._thread_lock.release()
            return False
        if granted is None:
            self._thread_lock.release()
            return False
        os.close(fd)
        self._fd = granted
        return True

    def close(self) -> None:
        if self._fd is not None and self._pid == current_pid():
            os.close(self._fd)
        self._fd = None

    def release(self) -> None:
        if self._fd is not None and self._pid == current_pid():
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._thread_lock.release()
