"""The sign-in limiter's waits: a backoff per address and per user at it, never a lock."""

from __future__ import annotations

import pytest

from celery_app.web.auth import SIGN_IN_BACKOFF_S, SIGN_IN_WINDOW_S, SignInLimiter, TooManySignIns


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def waits(limiter: SignInLimiter, address: str, name: str | None) -> int:
    try:
        limiter.check(address, name)
    except TooManySignIns as exc:
        return int(exc.details["retry_after"])
    return 0


def test_each_failure_past_the_limit_doubles_the_wait_up_to_the_window() -> None:
    clock = Clock()
    limiter = SignInLimiter(3, clock)
    seen = []
    for _ in range(6):
        limiter.failed("10.0.0.1", "admin")
        seen.append(waits(limiter, "10.0.0.1", "admin"))
        clock.now += seen[-1]  # the client waits as told, then fails again
    base = int(SIGN_IN_BACKOFF_S)
    assert seen == [0, 0, base, 2 * base, 4 * base, int(SIGN_IN_WINDOW_S)]


def test_failures_for_a_user_elsewhere_never_make_that_user_wait() -> None:
    limiter = SignInLimiter(3, Clock())
    for address in [f"10.0.0.{n}" for n in range(20)] * 3:
        limiter.failed(address, "admin")
    assert waits(limiter, "10.0.1.1", "admin") == 0
    assert waits(limiter, "10.0.0.1", "admin") > 0


def test_a_quiet_window_forgets_the_failures() -> None:
    clock = Clock()
    limiter = SignInLimiter(3, clock)
    for _ in range(3):
        limiter.failed("10.0.0.1", None)
    clock.now += SIGN_IN_WINDOW_S
    limiter.failed("10.0.0.1", None)
    assert waits(limiter, "10.0.0.1", None) == 0


@pytest.mark.parametrize("name", [None, "admin"])
def test_the_address_alone_is_limited_whatever_name_is_tried(name: str | None) -> None:
    limiter = SignInLimiter(2, Clock())
    limiter.failed("10.0.0.1", "a")
    limiter.failed("10.0.0.1", "b")
    assert waits(limiter, "10.0.0.1", name) == SIGN_IN_BACKOFF_S
