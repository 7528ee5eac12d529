"""A failure whose effect is unknown (issue 23): at-most-once waits for a verdict, never retries."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kernel.errors import InvalidArgument
from kernel.states import Effect
from kernel.states import OccurrenceStatus as S

if TYPE_CHECKING:
    from kernel.types import Claim
    from tests.kernel.conftest import Harness


def _fail(k: Harness, claim: Claim, effect: Effect, *, retryable: bool = True) -> str:
    return k.kernel.fail(
        claim.occurrence.id,
        owner=claim.owner,
        fence=claim.fence,
        code="TIMEOUT",
        message="timed out after the request was sent",
        retryable=retryable,
        effect=effect,
    )


def test_an_unknown_outcome_of_an_at_most_once_run_needs_adjudication(k: Harness) -> None:
    claim = k.running(delivery="at-most-once", max_attempts=3, pool="p")
    occ_id = claim.occurrence.id
    assert _fail(k, claim, Effect.UNKNOWN) == S.NEEDS_ADJUDICATION
    occ = k.kernel.get_occurrence(occ_id)
    assert (occ.status, occ.attempt, occ.lease_owner) == (S.NEEDS_ADJUDICATION, 1, None)
    assert occ.last_error is not None and occ.last_error["code"] == "TIMEOUT"
    assert occ.settled_at is None  # unresolved: retention keeps it
    [event] = [
        e for e in k.kernel.events(occurrence_id=occ_id) if e.type.startswith("occurrence_n")
    ]
    assert event.type == "occurrence_needs_adjudication"
    assert event.data["reason"] == "unknown_outcome" and event.data["error"]["code"] == "TIMEOUT"
    # Never claimable again, however long it waits; its pool slot is free.
    k.clock.advance(3600)
    assert k.kernel.claim(occ_id, owner="w2", lease=30) is None
    assert [(p.name, p.running) for p in k.kernel.pools()] == [("p", 0)]
    # An operator's not_applied makes it runnable again, with its attempt given back.
    k.kernel.adjudicate(occ_id, decision="not_applied", request_id="r1", operator="op")
    again = k.kernel.claim(occ_id, owner="w2", lease=30)
    assert again is not None and again.occurrence.attempt == 1


def test_the_last_attempt_and_a_final_error_still_wait_for_a_verdict(k: Harness) -> None:
    """Unknown is not failed: an at-most-once run whose effect may have happened is never
    dead-lettered as if it had not, whatever its attempts or retryability."""
    last = k.running("last", delivery="at-most-once", max_attempts=1)
    assert _fail(k, last, Effect.UNKNOWN) == S.NEEDS_ADJUDICATION
    final = k.running("final", delivery="at-most-once", max_attempts=3)
    assert _fail(k, final, Effect.UNKNOWN, retryable=False) == S.NEEDS_ADJUDICATION


def test_at_least_once_retries_an_unknown_outcome(k: Harness) -> None:
    claim = k.running(delivery="at-least-once", max_attempts=3)
    assert _fail(k, claim, Effect.UNKNOWN) == S.RETRY_WAIT
    k.clock.advance(10)
    assert k.kernel.claim(claim.occurrence.id, owner="w2", lease=30) is not None


@pytest.mark.parametrize("delivery", ["at-most-once", "at-least-once"])
def test_a_known_not_applied_failure_retries_under_either_delivery(
    k: Harness, delivery: str
) -> None:
    claim = k.running(delivery=delivery, max_attempts=3)
    assert _fail(k, claim, Effect.NOT_APPLIED) == S.RETRY_WAIT


def test_an_applied_failure_is_not_repeated_at_most_once(k: Harness) -> None:
    once = k.running("once", delivery="at-most-once", max_attempts=3)
    assert _fail(k, once, Effect.APPLIED) == S.DEAD_LETTER
    many = k.running("many", delivery="at-least-once", max_attempts=3)
    assert _fail(k, many, Effect.APPLIED) == S.RETRY_WAIT


def test_a_pending_cancel_wins_over_an_unknown_outcome(k: Harness) -> None:
    """As at a lease's expiry: the operator asked it to stop, so it is never run again."""
    claim = k.running(delivery="at-most-once", max_attempts=3)
    occ_id = claim.occurrence.id
    k.kernel.cancel(occ_id, request_id="c1", operator="op")
    assert _fail(k, claim, Effect.UNKNOWN) == S.CANCELLED
    assert k.kernel.get_occurrence(occ_id).settled_at is not None


def test_a_wrong_effect_is_invalid_and_changes_nothing(k: Harness) -> None:
    claim = k.running(delivery="at-most-once")
    with pytest.raises(InvalidArgument) as refused:
        _fail(k, claim, "maybe")  # type: ignore[arg-type]
    assert refused.value.field == "effect"
    assert k.kernel.get_occurrence(claim.occurrence.id).status == S.RUNNING
