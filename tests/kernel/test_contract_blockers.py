"""Nothing waits without a named reason (issue 39): every unsettled occurrence that is not
claimable now has a blocker the kernel names, decided from the claim's own predicates;
one the claim would take reads ``none``, and one left so too long is ``stranded``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kernel.errors import NotFound
from kernel.states import Effect
from kernel.states import OccurrenceStatus as S

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness


def _kind(k: Harness, occurrence_id: int) -> str | None:
    """The blocker's kind, checked against the claim: ``none`` exactly when it claims."""
    blocker = k.kernel.blocker(occurrence_id)
    kind = None if blocker is None else blocker.kind
    if kind is not None:
        claimed = k.kernel.claim(occurrence_id, owner="probe", lease=30)
        assert (claimed is not None) == (kind == "none"), (kind, claimed)
    return kind


def _unresolved(k: Harness, job_id: str = "charge", overlap: str = "allow") -> int:
    claim = k.running(job_id, delivery="at-most-once", overlap=overlap, max_attempts=3)
    k.kernel.fail(
        claim.occurrence.id,
        owner=claim.owner,
        fence=claim.fence,
        code="TIMEOUT",
        message="no answer after sending",
        effect=Effect.UNKNOWN,
    )
    return claim.occurrence.id


def test_a_queued_occurrence_nothing_holds_reads_none_and_a_running_one_has_no_blocker(
    k: Harness,
) -> None:
    [occ] = k.occurrences()
    blocker = k.kernel.blocker(occ)
    assert blocker is not None and (blocker.kind, blocker.text) == ("none", "none: claimable now")
    assert _kind(k, occ) == "none"  # and the claim took it
    assert k.kernel.blocker(occ) is None
    with pytest.raises(NotFound):
        k.kernel.blocker(occ + 1000)


def test_a_run_now_behind_an_unresolved_at_most_once_run_awaits_its_adjudication(
    k: Harness,
) -> None:
    first = _unresolved(k)
    blocker = k.kernel.blocker(first)
    assert blocker is not None and (blocker.kind, blocker.waits_for) == (
        "awaiting_adjudication",
        first,
    )
    forced = k.kernel.run_now("charge", request_id="r1", operator="op", force=True)
    second = forced.occurrence.id
    blocker = k.kernel.blocker(second)
    assert blocker is not None
    assert (blocker.kind, blocker.waits_for) == ("awaiting_adjudication", first)
    assert blocker.text == f"awaiting adjudication of occurrence {first} (at-most-once)"
    assert _kind(k, second) == "awaiting_adjudication"
    k.kernel.adjudicate(first, decision="abandon", request_id="v1", operator="op")
    assert _kind(k, second) == "none"


def test_an_exclusive_occurrence_waits_behind_the_running_one(k: Harness) -> None:
    running = k.running("nightly", overlap="queue")
    [queued] = k.fire("nightly").created
    blocker = k.kernel.blocker(queued)
    assert blocker is not None and (blocker.kind, blocker.waits_for) == (
        "behind",
        running.occurrence.id,
    )
    assert _kind(k, queued) == "behind"


def test_a_disabled_job_names_who_disabled_it(k: Harness) -> None:
    [occ] = k.occurrences()
    k.kernel.set_job_enabled("job", False, operator="ops")
    blocker = k.kernel.blocker(occ)
    assert blocker is not None and blocker.kind == "job_disabled"
    assert "disabled by ops" in blocker.text
    assert _kind(k, occ) == "job_disabled"


def test_a_retry_waits_not_before_its_time(k: Harness) -> None:
    claim = k.running(max_attempts=3)
    occ = claim.occurrence.id
    k.kernel.fail(occ, owner="w1", fence=claim.fence, code="E", message="boom")
    assert k.kernel.get_occurrence(occ).status == S.RETRY_WAIT
    blocker = k.kernel.blocker(occ)
    assert blocker is not None and blocker.kind == "not_before"
    assert blocker.not_before is not None and blocker.text == f"not before {blocker.not_before}"
    assert _kind(k, occ) == "not_before"
    k.clock.advance(11)
    assert _kind(k, occ) == "none"


def test_a_full_pool_is_named(k: Harness) -> None:
    k.kernel.set_pool_limit("db", 1)
    first, second = k.occurrences("a", 2, pool="db")
    assert k.kernel.claim(first, owner="w1", lease=30) is not None
    blocker = k.kernel.blocker(second)
    assert blocker is not None and (blocker.kind, blocker.pool) == ("pool_full", "db")
    assert _kind(k, second) == "pool_full"


def test_approval_and_pause_are_named(k: Harness) -> None:
    k.define("gated", approval={"required": True, "timeout": "10m"})
    [gated] = k.fire("gated").created
    assert _kind(k, gated) == "awaiting_approval"

    claim = k.running(max_attempts=1)
    occ = claim.occurrence.id
    k.kernel.request_pause(
        occ, expected_fence=1, request_id="p1", safe_points=("before_execute",), operator="o"
    )
    answer = k.kernel.renew(occ, owner="w1", fence=1, lease=30)
    assert answer.pause is not None
    k.kernel.ack_pause(
        occ,
        owner="w1",
        fence=1,
        request_id="p1",
        expected_revision=answer.pause.revision,
        safe_point="before_execute",
        checkpoint=None,
    )
    assert _kind(k, occ) == "paused"


def test_blockers_of_many_leave_out_unknown_ids(k: Harness) -> None:
    a, b = k.occurrences(n=2)
    found = k.kernel.blockers([a, b, b + 1000])
    assert sorted(found) == [a, b]
    assert {blocker.kind for blocker in found.values() if blocker} == {"none"}


def test_an_occurrence_nothing_holds_yet_no_claim_took_is_stranded_once_per_fence(
    k: Harness,
) -> None:
    [free] = k.occurrences()
    [held] = k.occurrences("held")
    k.kernel.set_job_enabled("held", False, operator="ops")
    assert k.kernel.watchdog(grace=30)["stranded"] == []
    k.clock.advance(31)
    found = k.kernel.record_watchdog(grace=30)
    assert [s["occurrence_id"] for s in found["stranded"]] == [free]  # not the held one
    assert found["stranded"][0]["waiting_ms"] == 31_000
    assert found["new_events"] == 1
    assert k.kernel.record_watchdog(grace=30)["new_events"] == 0
    assert "watchdog_stranded" in k.event_types(free)
    assert held not in [s["occurrence_id"] for s in found["stranded"]]
