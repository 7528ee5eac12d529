"""Operator actions: requeue, adjudicate, and request-id idempotency (I4, I6, I7)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from kernel.errors import EvidenceConflict, FenceConflict, StateConflict
from kernel.states import OccurrenceStatus as S
from kernel.types import ActionResult

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness


def dead_letter(k: Harness, job_id: str = "job", code: str = "BOOM") -> int:
    claim = k.running(job_id, max_attempts=1)
    k.kernel.fail(claim.occurrence.id, owner="w1", fence=claim.fence, code=code, message="no")
    assert k.kernel.get_occurrence(claim.occurrence.id).status == S.DEAD_LETTER
    return claim.occurrence.id


def needs_adjudication(k: Harness, job_id: str) -> int:
    claim = k.running(job_id, delivery="at-most-once", max_attempts=1)
    k.clock.advance(30)
    assert k.kernel.expire_leases()["needs_adjudication"] == 1
    return claim.occurrence.id


def test_requeue_grants_one_claim_that_consumes_no_attempt(k: Harness) -> None:
    occ_id = dead_letter(k)
    result = k.kernel.requeue(
        occ_id, expected_fence=1, expected_error_code="BOOM", request_id="rq-1", operator="ops"
    )
    assert not result.deduplicated and result.occurrence.status == S.RETRY_WAIT
    assert result.occurrence.settled_at is None
    assert [h.occurrence_id for h in k.kernel.dispatch_batch()] == [occ_id]
    claim = k.kernel.claim(occ_id, owner="w2", lease=30)
    assert claim is not None and (claim.fence, claim.occurrence.attempt) == (2, 1)
    claimed = k.kernel.events(occurrence_id=occ_id)[-1]
    assert claimed.data["requeue_request_id"] == "rq-1"
    # The grant is spent: failing again dead-letters, and nothing can claim it again.
    assert k.kernel.fail(occ_id, owner="w2", fence=2, code="BOOM", message="again") == "dead_letter"
    assert k.kernel.claim(occ_id, owner="w3", lease=30) is None
    requeued = [e for e in k.kernel.events(occurrence_id=occ_id) if e.type == "occurrence_requeued"]
    assert [(e.fence, e.data["request_id"], e.data["previous_error"]) for e in requeued] == [
        (1, "rq-1", "BOOM")
    ]


def test_requeue_needs_its_evidence_to_hold(k: Harness) -> None:
    occ_id = dead_letter(k)
    with pytest.raises(FenceConflict) as fence:
        k.kernel.requeue(
            occ_id, expected_fence=0, expected_error_code="BOOM", request_id="rq-1", operator="ops"
        )
    assert fence.value.details["actual_fence"] == 1
    with pytest.raises(EvidenceConflict) as code:
        k.kernel.requeue(
            occ_id,
            expected_fence=1,
            expected_error_code="LEASE_EXPIRED",
            request_id="rq-2",
            operator="ops",
        )
    assert "'BOOM'" in code.value.message
    [queued] = k.occurrences("other")
    with pytest.raises(StateConflict):
        k.kernel.requeue(
            queued, expected_fence=0, expected_error_code="BOOM", request_id="rq-3", operator="ops"
        )
    assert k.kernel.get_occurrence(occ_id).status == S.DEAD_LETTER
    # A refused request left no trace, so its id can be used again once the evidence holds.
    again = k.kernel.requeue(
        occ_id, expected_fence=1, expected_error_code="BOOM", request_id="rq-1", operator="ops"
    )
    assert not again.deduplicated and again.occurrence.status == S.RETRY_WAIT


def test_requeue_compares_the_error_code_exactly(k: Harness) -> None:
    # SQLite's LIKE ignores ASCII case: the old pattern guard revived a BOOM for "boom".
    occ_id = dead_letter(k, code="A_B%")
    for other in ("a_b%", "AxB%", "A_B"):
        with pytest.raises(EvidenceConflict):
            k.kernel.requeue(
                occ_id, expected_fence=1, expected_error_code=other, request_id=other, operator="o"
            )
    assert k.kernel.get_occurrence(occ_id).status == S.DEAD_LETTER
    again = k.kernel.requeue(
        occ_id, expected_fence=1, expected_error_code="A_B%", request_id="rq", operator="o"
    )
    assert again.occurrence.status == S.RETRY_WAIT


def test_adjudicate_applied_not_applied_and_abandon(k: Harness) -> None:
    applied = needs_adjudication(k, "applied")
    not_applied = needs_adjudication(k, "not-applied")
    abandoned = needs_adjudication(k, "abandoned")

    result = k.kernel.adjudicate(applied, decision="applied", request_id="adj-1", operator="ops")
    assert result.occurrence.status == S.SUCCEEDED and result.occurrence.settled_at is not None

    result = k.kernel.adjudicate(
        not_applied, decision="not_applied", request_id="adj-2", operator="ops"
    )
    assert result.occurrence.status == S.RETRY_WAIT
    # max_attempts is 1 and spent by the uncertain run: the operator's word earns it back.
    claim = k.kernel.claim(not_applied, owner="w2", lease=30)
    assert claim is not None and (claim.fence, claim.occurrence.attempt) == (2, 1)

    result = k.kernel.adjudicate(abandoned, decision="abandon", request_id="adj-3", operator="ops")
    occ = result.occurrence
    assert occ.status == S.DEAD_LETTER and (occ.last_error or {}).get("code") == "ABANDONED"
    assert k.kernel.claim(abandoned, owner="w2", lease=30) is None

    decided = [e for e in k.kernel.events() if e.type == "occurrence_adjudicated"]
    assert [(e.occurrence_id, e.data["decision"], e.data["status"]) for e in decided] == [
        (applied, "applied", "succeeded"),
        (not_applied, "not_applied", "retry_wait"),
        (abandoned, "abandon", "dead_letter"),
    ]
    with pytest.raises(StateConflict):
        k.kernel.adjudicate(applied, decision="abandon", request_id="adj-4", operator="ops")


def test_every_action_replays_by_request_id_and_refuses_other_evidence(k: Harness) -> None:
    """First call acts; the same call again answers deduplicated and writes nothing."""
    undecided = needs_adjudication(k, "undecided")
    running = k.running("running").occurrence.id
    dead = dead_letter(k, "dead")
    [queued] = k.occurrences("queued")
    safe = ("before_execute",)
    held = k.running("held").occurrence.id
    k.kernel.request_pause(
        held, expected_fence=1, request_id="p0", safe_points=safe, operator="ops"
    )
    k.kernel.ack_pause(
        held,
        owner="w1",
        fence=1,
        request_id="p0",
        expected_revision=None,
        safe_point="before_execute",
        checkpoint=None,
    )

    actions: list[tuple[Callable[[], ActionResult], Callable[[], ActionResult]]] = [
        (
            lambda: k.kernel.request_pause(
                running, expected_fence=1, request_id="p", safe_points=safe, operator="ops"
            ),
            lambda: k.kernel.request_pause(
                running, expected_fence=2, request_id="p", safe_points=safe, operator="ops"
            ),
        ),
        (
            lambda: k.kernel.requeue(
                dead, expected_fence=1, expected_error_code="BOOM", request_id="rq", operator="ops"
            ),
            lambda: k.kernel.requeue(
                dead, expected_fence=1, expected_error_code="OTHER", request_id="rq", operator="ops"
            ),
        ),
        (
            lambda: k.kernel.adjudicate(
                undecided, decision="applied", request_id="adj", operator="ops"
            ),
            lambda: k.kernel.adjudicate(
                undecided, decision="abandon", request_id="adj", operator="ops"
            ),
        ),
        (
            lambda: k.kernel.cancel(queued, request_id="c", operator="ops"),
            lambda: k.kernel.cancel(running, request_id="c", operator="ops"),
        ),
        (
            lambda: k.kernel.resume(held, request_id="res", operator="ops", expected_revision=2),
            lambda: k.kernel.resume(held, request_id="res", operator="ops", expected_revision=3),
        ),
        (
            lambda: k.kernel.run_now("queued", request_id="now", operator="ops"),
            lambda: k.kernel.run_now("dead", request_id="now", operator="ops"),
        ),
    ]
    for act, conflicting in actions:
        first = act()
        assert not first.deduplicated
        events = len(k.kernel.events(limit=1000))
        replay = act()
        assert replay.deduplicated and replay.occurrence.id == first.occurrence.id
        assert replay.occurrence.status == first.occurrence.status
        assert len(k.kernel.events(limit=1000)) == events
        with pytest.raises(EvidenceConflict) as refused:
            conflicting()
        assert repr(first.request_id) in refused.value.message
    # A request id names one action: reusing it for another action is refused too.
    with pytest.raises(EvidenceConflict):
        k.kernel.cancel(running, request_id="p", operator="ops")
    assert not k.kernel.get_occurrence(running).cancel_requested
