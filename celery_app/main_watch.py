"""A prefork pool process ends with its worker's main process, whichever thread forked it.

Celery has each pool process ask Linux for SIGKILL when its parent ends
(``PR_SET_PDEATHSIG``), and Linux sends it when the parent *thread* ends. Billiard's
blocking pool (Celery's with a transport that has no event loop: the embedded broker's)
forks the replacement of a pool process that died from its supervisor thread, and that
thread ends at a warm shutdown. The replacement was SIGKILLed a second into every warm
shutdown: a run it was executing was lost, and one killed idle, holding the lock of the
pool's shared task queue, left the main process waiting for that lock at exit forever.

A pool process forked by another thread than the main one (noted in the main process just
before the fork) clears that signal and waits on the main process itself instead: on a
pidfd, readable once the process has ended, in a daemon thread that then SIGKILLs it.
Where there are no pidfds (Linux before 5.3) the signal is left as it was.
"""

from __future__ import annotations

import os
import select
import signal
import threading

from billiard.util import set_pdeathsig

__all__ = ["follow_main_process", "note_forking_thread"]

# Set in the parent by the fork hook, read in the child (memory is copied at the fork):
# the forking process, and whether its main thread forked.
_forked_from: tuple[int, bool] | None = None


def note_forking_thread() -> None:
    """In the worker's main process: note, before each fork, whether the main thread forks."""

    def note() -> None:
        global _forked_from
        _forked_from = (os.getpid(), threading.current_thread() is threading.main_thread())

    os.register_at_fork(before=note)


def follow_main_process() -> None:
    """In a pool process just forked: end when the worker's main process ends, not when
    the thread that forked this process does."""
    if _forked_from is None or _forked_from[1]:
        return  # forked by the main thread: the signal Celery asked for is right as it is
    main_pid = _forked_from[0]
    try:
        pidfd = os.pidfd_open(main_pid)
    except (AttributeError, OSError):  # no pidfds here, or the main process is gone
        return
    try:
        set_pdeathsig(0)
    except OSError:  # no prctl to be had (billiard loads it from libc.so.6): it stays set
        os.close(pidfd)
        return
    if os.getppid() != main_pid:  # it ended before the signal was cleared
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Thread(
        target=_end_with, args=(pidfd,), name="main-process-watch", daemon=True
    ).start()


def _end_with(pidfd: int) -> None:
    select.select([pidfd], [], [])
    os.kill(os.getpid(), signal.SIGKILL)
