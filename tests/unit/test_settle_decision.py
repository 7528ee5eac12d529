"""A settle's decision is pure: the outcome and, for a failure, the row read in; the state
SETTLE is asked to write out (kernel.occurrences.runs.decide)."""

from __future__ import annotations

import random

from kernel.occurrences.runs import SettleDecision, decide
from kernel.records import dumps
from kernel.states import Effect, OccurrenceStatus

_POLICY = {"backoff": 2, "factor": 2, "max": 60, "jitter": 0}


def _failed(attempt: int, max_attempts: int = 3) -> dict[str, object]:
    return {
        "definition": dumps({"retry": _POLICY}),
        "attempt": attempt,
        "max_attempts": max_attempts,
    }


def _decide(outcome: str, row: object = None, **kw: object) -> SettleDecision:
    args = {"effect": Effect.NOT_APPLIED, "retryable": True, "retry_in": None, "rnd": None}
    return decide(outcome, row, **{**args, **kw})  # type: ignore[arg-type]


def test_a_success_or_a_cancel_reads_nothing() -> None:
    assert _decide("succeeded") == SettleDecision(OccurrenceStatus.SUCCEEDED)
    assert _decide("cancelled") == SettleDecision(OccurrenceStatus.CANCELLED)


def test_a_failure_with_attempts_left_waits_its_backoff_or_the_delay_the_code_chose() -> None:
    assert _decide("failed", _failed(2)) == SettleDecision(OccurrenceStatus.RETRY_WAIT, 4000)
    chosen = _decide("failed", _failed(2), retry_in=0.5, rnd=random.Random(1))
    assert chosen == SettleDecision(OccurrenceStatus.RETRY_WAIT, 500)


def test_a_failure_without_attempts_or_not_retryable_is_dead_lettered_with_its_effect() -> None:
    unknown = Effect.UNKNOWN
    dead = SettleDecision(OccurrenceStatus.DEAD_LETTER, effect=unknown)
    assert _decide("failed", _failed(3), effect=unknown) == dead
    assert _decide("failed", _failed(1), effect=unknown, retryable=False) == dead
