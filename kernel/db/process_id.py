"""This process's id without a system call per use.

Every transaction asks whether the process forked since its connection was opened
(Celery's prefork children inherit their parent's kernel), and ``os.getpid()`` is a
system call each time (glibc no longer caches it). The id is read once per process
and again in a forked child (``os.register_at_fork``).
"""

from __future__ import annotations

import os

__all__ = ["current_pid"]

_pid = os.getpid()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)


def current_pid() -> int:
    """The id of the process running now."""
    return _pid
