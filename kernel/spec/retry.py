"""The retry decision: a pure function the kernel carries out in one transition."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

__all__ = ["RetryDecision", "attempts_left", "retry_decision", "backoff_seconds"]


@dataclass(frozen=True, slots=True)
class RetryDecision:
    retry: bool
    delay_s: float


def backoff_seconds(
    policy: dict[str, Any], attempt: int, rnd: random.Random | None = None
) -> float:
    """Delay before the retry that follows failed attempt number ``attempt`` (1-based).

    ``backoff * factor**(attempt-1)``, capped at ``max``, spread by ``±jitter`` (a
    fraction) so that a burst of failures does not retry in step, and capped again: the
    spread never takes a delay past ``max`` (at the cap it only shortens it).
    """
    longest = float(policy["max"])
    try:
        base = float(policy["backoff"]) * float(policy["factor"]) ** max(attempt - 1, 0)
    except OverflowError:  # factor ** attempt past float range: the cap applies anyway
        base = float("inf")
    capped = min(base, longest)
    jitter = float(policy["jitter"])
    if jitter <= 0:
        return capped
    spread = (rnd or random).uniform(-jitter, jitter)
    return min(longest, max(0.0, capped * (1.0 + spread)))


def attempts_left(attempt: int, max_attempts: int) -> bool:
    """Whether another attempt may start: the mirror of the statements' ``ATTEMPTS_LEFT``
    (:mod:`kernel.statements.predicates`), for a decision taken from a row already read."""
    return attempt < max_attempts


def retry_decision(
    policy: dict[str, Any],
    *,
    attempt: int,
    max_attempts: int,
    retryable: bool,
    rnd: random.Random | None = None,
) -> RetryDecision:
    """Retry when the error is retryable and attempts remain; otherwise give up."""
    if not retryable or not attempts_left(attempt, max_attempts):
        return RetryDecision(retry=False, delay_s=0.0)
    return RetryDecision(retry=True, delay_s=backoff_seconds(policy, attempt, rnd))
