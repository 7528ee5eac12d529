"""A host-wide queue for SQLite writers, so contention waits without SQLite's sleeps.

SQLite makes a writer that finds the database locked sleep in steps of 1, 2, 5,
10 ms and retry; with two worker processes claiming and settling back to back,
those sleeps, not the work, set the pace. Taking a lock beside the database first
lines writers up in the operating system, which wakes the next one the moment the
lock is released. Correctness still rests on SQLite's own lock (``BEGIN
IMMEDIATE``): the gate only decides who asks first.

The lock is a process-shared, robust POSIX mutex in ``<database>.writer-lock``,
mapped by every process that writes: a writer blocks in its own thread with a
timeout (``pthread_mutex_timedlock``), with no hand-off to a helper thread (an
``flock`` cannot time out, so a waiter thread used to block in it for the caller:
0.6 more context switches per shallow run, bench/end_to_end.py), and a holder that
dies passes the mutex on (``EOWNERDEAD``). Where the C library has no such mutex
the gate is absent and SQLite alone decides.

Without the gate, writers that find the lock free take it again and again, which
is faster (kernel pairs/s at 2 and 4 processes 12-45 % higher, session 5) but not
fair: on a loaded 2-core CI machine one of tests/kernel/test_race.py's four
processes waited past SQLite's busy timeout and failed with SQLITE_BUSY.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import threading
import time
from typing import Any

from kernel.db.process_id import current_pid

__all__ = ["KeptWal", "WriterGate", "sync_wal"]

#: Room for the mutex (glibc and musl use at most 48 bytes on 64-bit machines), then a
#: marker saying it was initialised.
_MUTEX_BYTES = 128
_MARKER = b"kernel-writer-gate-1"
#: Then three commit numbers shared by every process (see :class:`WriterGate`): a file made
#: by an older release grows to hold them, zero, which is what they start at.
_MARKER_END = _MUTEX_BYTES + len(_MARKER)
_COUNTERS_AT = 256
_FILE_BYTES = _COUNTERS_AT + 3 * 8
_BEGUN, _WRITTEN, _DURABLE = range(3)
_PROCESS_SHARED = 1  # PTHREAD_PROCESS_SHARED
_ROBUST = 1  # PTHREAD_MUTEX_ROBUST
_CLOCK_MONOTONIC = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _pthread() -> Any:
    """The C library's mutex functions, or None where process-shared robust mutexes with a
    timed lock are missing."""
    names = (
        "pthread_mutex_trylock",
        "pthread_mutex_timedlock",
        "pthread_mutex_consistent",
        "pthread_mutexattr_setrobust",
    )
    for library in (None, "libpthread.so.0"):
        try:
            lib = ctypes.CDLL(library, use_errno=True)
        except OSError:
            continue
        if all(hasattr(lib, name) for name in names):
            return lib
    return None


_LIB = _pthread()
#: A wait measured on the monotonic clock where the C library offers it (glibc 2.30).
_CLOCKLOCK = getattr(_LIB, "pthread_mutex_clocklock", None)


def _deadline(timeout_s: float, monotonic: bool) -> _Timespec:
    at = (time.monotonic() if monotonic else time.time()) + timeout_s
    return _Timespec(int(at), int((at % 1) * 1e9))


class _SharedMutex:
    """The mutex in the file at ``path``, mapped into this process (initialised once, under
    an ``flock`` of the file, by whichever process maps it first)."""

    def __init__(self, path: str) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_size < _FILE_BYTES:
                os.ftruncate(fd, _FILE_BYTES)
            self._map = mmap.mmap(fd, _FILE_BYTES)
            self.memory = (ctypes.c_char * _MUTEX_BYTES).from_buffer(self._map)
            self.counters = (ctypes.c_uint64 * 3).from_buffer(self._map, _COUNTERS_AT)
            if self._map[_MUTEX_BYTES:_MARKER_END] != _MARKER:
                self._initialise()
                self._map[_MUTEX_BYTES:_MARKER_END] = _MARKER
        finally:
            # Unlocked explicitly: the map holds a duplicate of the file, and with it the flock.
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _initialise(self) -> None:
        attr = ctypes.create_string_buffer(64)  # pthread_mutexattr_t, 4 or 8 bytes
        checks = (
            _LIB.pthread_mutexattr_init(attr),
            _LIB.pthread_mutexattr_setpshared(attr, _PROCESS_SHARED),
            _LIB.pthread_mutexattr_setrobust(attr, _ROBUST),
            _LIB.pthread_mutex_init(self.memory, attr),
            _LIB.pthread_mutexattr_destroy(attr),
        )
        if any(checks):
            raise OSError(next(c for c in checks if c), "pthread_mutex_init")

    def lock(self, timeout_s: float) -> bool:
        # A free mutex (the usual case) is taken without the deadline's clock read and
        # ctypes struct (bench/README.md, session 20); a waiter is no worse placed for it:
        # a timed lock takes a free mutex at once too.
        code: int = _LIB.pthread_mutex_trylock(self.memory)
        if code == errno.EBUSY:
            code = self._wait(timeout_s)
        if code == errno.EOWNERDEAD:  # its holder died holding it: the next in line takes it
            code = _LIB.pthread_mutex_consistent(self.memory)
        return code == 0

    def _wait(self, timeout_s: float) -> int:
        if _CLOCKLOCK is not None:
            return int(
                _CLOCKLOCK(self.memory, _CLOCK_MONOTONIC, ctypes.byref(_deadline(timeout_s, True)))
            )
        return int(
            _LIB.pthread_mutex_timedlock(self.memory, ctypes.byref(_deadline(timeout_s, False)))
        )

    def unlock(self) -> None:
        _LIB.pthread_mutex_unlock(self.memory)

    def close(self) -> None:
        del self.memory, self.counters  # the buffer exports, so that the map can close
        self._map.close()


class KeptWal:
    """A descriptor of the database's WAL kept for the commits of one SQLite connection.

    Opening the WAL per sync cost an ``openat`` and a ``close``, two a shallow run each
    (bench/README.md, session 25). A kept descriptor is only safe while it names the file
    the commits went to: SQLite deletes the WAL when the last connection to the database closes
    (the next one makes a new file), and only then: a checkpoint restarts or truncates the
    same file. A connection in WAL mode holds a shared lock on the database from its first
    transaction until it closes, which keeps any close from deleting the WAL meanwhile. So
    the descriptor is opened after a commit of ``owner`` (a DBAPI connection) and used only
    for commits of that same object: one that committed has stayed open since (a closed
    sqlite3 connection commits nothing), so the file at the path is still the one opened.
    A commit on any other connection (the held one replaced, a forked process's) opens anew.
    """

    __slots__ = ("fd", "owner")

    def __init__(self) -> None:
        self.fd: int | None = None
        self.owner: object = None

    def sync(self, database_path: str, owner: object) -> None:
        """``fdatasync`` the WAL after a commit of ``owner``, on the descriptor kept for it."""
        fd = self.fd if self.owner is owner else None
        if fd is None:
            fd = _open_wal(database_path)
            if fd is None:
                return
            self.close()
            self.fd, self.owner = fd, owner
        try:
            os.fdatasync(fd)
        except OSError:
            self.close()  # the next sync opens the WAL anew, as one opened per call does
            raise

    def close(self) -> None:
        fd, self.fd, self.owner = self.fd, None, None
        if fd is not None:
            os.close(fd)


def sync_wal(database_path: str) -> None:
    """``fdatasync`` the database's WAL, opened for this call: every commit written to it so
    far is then on disk (recovery keeps the log's longest valid prefix)."""
    fd = _open_wal(database_path)
    if fd is not None:
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)


def _open_wal(database_path: str) -> int | None:
    """The WAL, opened to be synced; None where there is none: the last close checkpointed
    everything and synced it."""
    try:
        return os.open(f"{database_path}-wal", os.O_RDONLY)
    except FileNotFoundError:
        return None


class WriterGate:
    """One per Kernel: a thread lock plus the host's shared mutex for ``database_path``.

    Uncontended, the gate costs one atomic operation in the mutex. Contended, the
    caller blocks (no polling) until the holder releases, or for at most ``timeout_s``:
    a writer frozen while holding the gate (SIGSTOP) must not hang the others past the
    busy timeout SQLite would have applied.
    """

    def __init__(self, database_path: str, timeout_s: float) -> None:
        self.database_path = database_path
        self.path = f"{database_path}.writer-lock"
        self.timeout_s = timeout_s
        # Re-entrant: a write retried on a fresh connection runs inside the first attempt.
        self._thread_lock = threading.RLock()
        self._depth = 0
        self._mutex: _SharedMutex | None = None
        self._unavailable = _LIB is None
        self._pid = current_pid()

    def acquire(self) -> bool:
        """Wait for the gate; False after the timeout (the caller then goes on without it)."""
        if self._unavailable:
            return False
        if self._pid != current_pid():
            # Forked: a thread of the parent may have held the thread lock at the fork.
            self._thread_lock, self._depth, self._pid = threading.RLock(), 0, current_pid()
        if not self._thread_lock.acquire(timeout=self.timeout_s):
            return False
        if self._depth:
            self._depth += 1
            return True
        if self._shared() is None:
            self._thread_lock.release()
            return False
        assert self._mutex is not None
        if not self._mutex.lock(self.timeout_s):
            self._thread_lock.release()
            return False
        self._depth = 1
        # Whoever held the gate before has finished or died: a commit it began is written
        # (or was never made), so no reader waits on it.
        counters = self._mutex.counters
        counters[_WRITTEN] = counters[_BEGUN]
        return True

    def commit_begins(self) -> int:
        """The number of the commit about to be sent (the caller holds the gate)."""
        counters = self._counters()
        counters[_BEGUN] += 1
        return int(counters[_BEGUN])

    def commit_written(self, number: int) -> None:
        """Commit ``number`` has returned (the caller still holds the gate)."""
        self._counters()[_WRITTEN] = number

    def synced(self, number: int) -> None:
        """Every commit up to ``number`` is on disk. Two processes may race here; the
        loser can only lower it, which costs a reader one sync more, never one less."""
        counters = self._counters()
        if counters[_DURABLE] < number:
            counters[_DURABLE] = number

    def unsynced(self) -> int | None:
        """The last written commit if some begun commit may not be on disk yet, else None."""
        shared = None if self._unavailable else self._shared()
        if shared is None:
            return None
        counters = shared.counters
        if counters[_DURABLE] >= counters[_BEGUN]:
            return None
        return int(counters[_WRITTEN])

    def _shared(self) -> _SharedMutex | None:
        """The mapped file, mapped on first use; None where it cannot be."""
        if self._mutex is None:
            try:
                self._mutex = _SharedMutex(self.path)
            except OSError:  # no room or no write access beside the database
                self._unavailable = True  # SQLite alone decides, from now on
        return self._mutex

    def _counters(self) -> Any:
        assert self._mutex is not None, "the gate was never taken"
        return self._mutex.counters

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0 and self._mutex is not None:
            self._mutex.unlock()
        self._thread_lock.release()

    def close(self) -> None:
        if self._mutex is not None:
            self._mutex.close()
        self._mutex = None
