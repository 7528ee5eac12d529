"""Loaded first by every Python process on a skewed host (its ``PYTHONPATH`` names this folder).

libfaketime 0.9.10 with ``FAKETIME_DONT_FAKE_MONOTONIC=1`` (only the wall clock skewed)
fails ``clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)`` with EINVAL, which is how
Python's ``time.sleep`` sleeps; timed waits on locks and events are unaffected. So here
``time.sleep`` waits on an event that is never set: the same monotonic wait, another call.
"""

from __future__ import annotations

import threading
import time

_NEVER = threading.Event()


def _sleep(seconds: float) -> None:
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    _NEVER.wait(seconds)


time.sleep = _sleep
