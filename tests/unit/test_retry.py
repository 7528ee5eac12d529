"""Retry arithmetic (kernel/spec/retry.py) is pure: property tests over backoff, factor, cap and
jitter, within the bounds the job spec allows (kernel/spec/sections.py)."""

from __future__ import annotations

import math
import random
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kernel.spec.retry import backoff_seconds, retry_decision

#: Attempts far past any max_attempts, so that factor ** attempt overflows floats too.
attempts = st.integers(min_value=1, max_value=5000)
seeds = st.integers(min_value=0, max_value=2**32 - 1)


@st.composite
def policies(draw: st.DrawFn, jitter: st.SearchStrategy[float] | None = None) -> dict[str, Any]:
    """A retry policy as the spec stores it: seconds, factor 1-100, max >= backoff, jitter 0-1."""
    backoff = draw(st.floats(min_value=0, max_value=86_400, allow_nan=False))
    longest = draw(st.floats(min_value=backoff, max_value=31 * 86_400, allow_nan=False))
    return {
        "backoff": backoff,
        "factor": draw(st.floats(min_value=1, max_value=100, allow_nan=False)),
        "max": longest,
        "jitter": draw(jitter if jitter is not None else st.floats(min_value=0, max_value=1)),
    }


def _capped(policy: dict[str, Any], attempt: int) -> float:
    try:
        base = policy["backoff"] * policy["factor"] ** (attempt - 1)
    except OverflowError:
        base = math.inf
    return float(min(base, policy["max"]))


class _Extreme(random.Random):
    """A random source that always spreads by the largest jitter it is allowed."""

    def __init__(self, sign: float) -> None:
        super().__init__(0)
        self.sign = sign

    def uniform(self, a: float, b: float) -> float:
        return b if self.sign > 0 else a


@given(policies(), attempts, seeds)
def test_a_delay_is_never_negative_nor_past_max(
    policy: dict[str, Any], attempt: int, seed: int
) -> None:
    delay = backoff_seconds(policy, attempt, random.Random(seed))
    assert 0 <= delay <= policy["max"]


@given(policies(), attempts, st.sampled_from([1.0, -1.0]))
def test_the_largest_jitter_either_way_stays_within_max(
    policy: dict[str, Any], attempt: int, sign: float
) -> None:
    assert 0 <= backoff_seconds(policy, attempt, _Extreme(sign)) <= policy["max"]


@given(policies(jitter=st.just(0.0)), attempts)
def test_without_jitter_the_delay_is_backoff_times_factor_capped_at_max(
    policy: dict[str, Any], attempt: int
) -> None:
    assert backoff_seconds(policy, attempt) == _capped(policy, attempt)


@given(policies(jitter=st.just(0.0)), attempts)
def test_without_jitter_delays_never_shrink_from_one_attempt_to_the_next(
    policy: dict[str, Any], attempt: int
) -> None:
    assert backoff_seconds(policy, attempt) <= backoff_seconds(policy, attempt + 1)


@given(policies(), attempts, seeds)
def test_jitter_spreads_by_at_most_its_fraction_of_the_capped_delay(
    policy: dict[str, Any], attempt: int, seed: int
) -> None:
    capped, jitter = _capped(policy, attempt), policy["jitter"]
    delay = backoff_seconds(policy, attempt, random.Random(seed))
    slack = 1e-9 * max(capped, 1.0)
    assert capped * (1 - jitter) - slack <= delay <= capped * (1 + jitter) + slack


def test_at_the_cap_jitter_only_shortens_the_delay() -> None:
    """Issue 23: max 1 h with jitter 0.1 gave 3955 s."""
    policy = {"backoff": 30.0, "factor": 2.0, "max": 3600.0, "jitter": 0.1}
    assert backoff_seconds(policy, 20, _Extreme(1.0)) == 3600.0
    assert backoff_seconds(policy, 20, _Extreme(-1.0)) == 3240.0
    assert backoff_seconds(policy, 1, _Extreme(1.0)) == 33.0


@given(
    policies(),
    st.integers(min_value=1, max_value=100),
    st.integers(min_value=1, max_value=100),
    st.booleans(),
    seeds,
)
def test_a_retry_is_decided_by_retryability_and_attempts_left_alone(
    policy: dict[str, Any], attempt: int, max_attempts: int, retryable: bool, seed: int
) -> None:
    decision = retry_decision(
        policy,
        attempt=attempt,
        max_attempts=max_attempts,
        retryable=retryable,
        rnd=random.Random(seed),
    )
    assert decision.retry == (retryable and attempt < max_attempts)
    expected = backoff_seconds(policy, attempt, random.Random(seed)) if decision.retry else 0.0
    assert decision.delay_s == expected
