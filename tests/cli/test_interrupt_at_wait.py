"""Ctrl-C in a follow loop ends it at its next wait, never inside a read (where the driver
would turn the interrupt into a storage error and the command would exit 1, not 130)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from celery_app.cli.output import interrupt_at_wait


def test_an_interrupt_during_a_read_is_raised_at_the_next_wait() -> None:
    with interrupt_at_wait() as wait:
        os.kill(os.getpid(), signal.SIGINT)  # arrives "during a read": nothing raised here
        read = sum(range(1000))
        with pytest.raises(KeyboardInterrupt):
            wait(5.0)
    assert read == 499500


def test_an_interrupt_during_a_wait_ends_it_at_once() -> None:
    with interrupt_at_wait() as wait:
        started = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        previous = signal.signal(signal.SIGALRM, lambda *_: os.kill(os.getpid(), signal.SIGINT))
        try:
            with pytest.raises(KeyboardInterrupt):
                wait(30.0)
        finally:
            signal.signal(signal.SIGALRM, previous)
        assert time.monotonic() - started < 29.0


def test_the_previous_handler_is_back_after_the_loop() -> None:
    before = signal.getsignal(signal.SIGINT)
    with interrupt_at_wait():
        assert signal.getsignal(signal.SIGINT) is not before
    assert signal.getsignal(signal.SIGINT) is before
