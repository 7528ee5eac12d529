"""A deadline the operating system keeps for this process's runs: SIGKILL, armed ahead.

A run's lease keeper cancels the run and, when it will not stop, ends its process
(:mod:`celery_app.held_run`). Both are this process's own acts, so neither happens
while the process is stopped (SIGSTOP, a frozen cgroup) or while its keeper cannot run
(C code holding the GIL, a renewal hung on a dead link). A chaos run caught it: a
worker frozen between its job's check of ``ctx.cancelled`` and the write it guarded
woke 8 s later, past its lease, and wrote. No check in the process can close that gap.

A POSIX timer whose signal is SIGKILL can: the kernel sends it at the deadline whatever
the process is doing, and SIGKILL ends even a stopped process. The timer is armed
relative to now on the monotonic clock ("in N seconds"): libfaketime, which skews a
host's wall clock in the chaos run, shifts an absolute deadline by the skew even when
it leaves the monotonic clock alone. Where the C library lacks POSIX timers the timer
is absent and the keeper alone stops runs.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import time
import weakref
from typing import Any

__all__ = ["KillTimer"]

_CLOCK_MONOTONIC = 1
_SIGEV_SIGNAL = 0


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class _Sigevent(ctypes.Structure):
    # Linux's struct sigevent: a value, the signal, how to notify, then 48 bytes of union.
    _fields_ = [
        ("sigev_value", ctypes.c_void_p),
        ("sigev_signo", ctypes.c_int),
        ("sigev_notify", ctypes.c_int),
        ("_union", ctypes.c_byte * 48),
    ]


def _timer_library() -> Any:
    """The C library holding ``timer_create`` (glibc 2.34+ itself, older in librt), or None."""
    for name in (None, "librt.so.1"):
        try:
            library = ctypes.CDLL(name, use_errno=True)
        except OSError:
            continue
        if hasattr(library, "timer_create") and hasattr(library, "timer_settime"):
            return library
    return None


_LIB = _timer_library()


def _delete(timer: ctypes.c_void_p, pid: int) -> None:
    if os.getpid() == pid:  # a forked child does not have its parent's timers
        _LIB.timer_delete(timer)


class KillTimer:
    """One timer of this process that SIGKILLs it when it expires."""

    def __init__(self, timer: ctypes.c_void_p) -> None:
        self._timer = timer
        # One spec filled in place (its one caller, the lease keeper, holds its lock): a run
        # arms and disarms (two calls a run), and building the ctypes structures each time
        # was half of a call's cost.
        self._spec = _Itimerspec()
        self._spec_ref = ctypes.byref(self._spec)
        self._disarmed = _Itimerspec()  # all zeros: disarms, never written
        self._disarmed_ref = ctypes.byref(self._disarmed)
        weakref.finalize(self, _delete, timer, os.getpid())

    @classmethod
    def create(cls) -> KillTimer:
        """A new, disarmed timer. Raises OSError where there is none to be had."""
        if _LIB is None:
            raise OSError(errno.ENOSYS, "the C library has no POSIX timers")
        event = _Sigevent(sigev_signo=signal.SIGKILL, sigev_notify=_SIGEV_SIGNAL)
        timer = ctypes.c_void_p()
        if _LIB.timer_create(_CLOCK_MONOTONIC, ctypes.byref(event), ctypes.byref(timer)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timer_create: {os.strerror(err)}")
        return cls(timer)

    def arm(self, at: float) -> None:
        """Kill this process at ``at`` on :func:`time.monotonic`'s clock (at once if passed)."""
        self._set(max(at - time.monotonic(), 1e-6))

    def disarm(self) -> None:
        self._settime(self._disarmed_ref)

    def _set(self, seconds: float) -> None:
        whole = int(seconds)
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = whole, int((seconds - whole) * 1e9)
        self._settime(self._spec_ref)

    def _settime(self, spec_ref: Any) -> None:
        if _LIB.timer_settime(self._timer, 0, spec_ref, None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timer_settime: {os.strerror(err)}")
