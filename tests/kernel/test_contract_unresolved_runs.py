"""Exclusivity counts unresolved runs (issue 23): an at-most-once run waiting for a verdict
blocks new runs of its job under every overlap policy, so no at-most-once job ever has two
possibly-live runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kernel.states import Effect
from kernel.states import OccurrenceStatus as S

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness


def _unresolved(k: Harness, overlap: str, **fields: object) -> int:
    """A job ``charge`` whose first run's outcome is unknown: needs_adjudication."""
    claim = k.running("charge", delivery="at-most-once", overlap=overlap, max_attempts=3, **fields)
    occ_id = claim.occurrence.id
    k.kernel.fail(
        occ_id,
        owner=claim.owner,
        fence=claim.fence,
        code="TIMEOUT",
        message="no answer after sending",
        effect=Effect.UNKNOWN,
    )
    assert k.kernel.get_occurrence(occ_id).status == S.NEEDS_ADJUDICATION
    return occ_id


@pytest.mark.parametrize("overlap", ["queue", "replace", "allow"])
def test_a_new_run_waits_until_the_unresolved_one_is_decided(k: Harness, overlap: str) -> None:
    first = _unresolved(k, overlap)
    [second] = k.fire("charge").created

    # Admitted, but not started: not claimed, not hinted, and not a candidate.
    assert k.kernel.get_occurrence(second).status == S.QUEUED
    assert k.kernel.get_occurrence(first).status == S.NEEDS_ADJUDICATION  # replace left it
    assert k.kernel.claim(second, owner="w2", lease=30) is None
    assert k.kernel.claim_next(owner="w2", lease=30) is None
    assert [h.occurrence_id for h in k.kernel.dispatch_batch(rehint_after=0)] == []

    k.kernel.adjudicate(first, decision="abandon", request_id="r1", operator="op")
    assert [h.occurrence_id for h in k.kernel.dispatch_batch(rehint_after=0)] == [second]
    claimed = k.kernel.claim(second, owner="w2", lease=30)
    assert claimed is not None and claimed.occurrence.status == S.RUNNING


def test_skip_skips_while_a_run_is_unresolved(k: Harness) -> None:
    _unresolved(k, "skip")
    report = k.fire("charge")
    assert list(report.created) == []
    [skipped] = [o for o in k.kernel.list_occurrences(job_id="charge") if o.status == S.SKIPPED]
    assert skipped.skip_reason == "overlap"


def test_queue_counts_the_unresolved_run_as_the_one_the_others_wait_behind(k: Harness) -> None:
    """``max_queued: 1``: one occurrence may wait behind the unresolved run, not two."""
    _unresolved(k, "queue", max_queued=1)
    assert len(k.fire("charge").created) == 1
    assert list(k.fire("charge").created) == []


def test_a_blocked_backlog_does_not_hide_other_work_from_claim_next(k: Harness) -> None:
    first = _unresolved(k, "queue")
    waiting = k.fire("charge", 20).created
    assert len(waiting) == 20
    [other] = k.occurrences("other")
    claimed = k.kernel.claim_next(owner="w2", lease=30)
    assert claimed is not None and claimed.occurrence.id == other
    assert k.kernel.get_occurrence(first).status == S.NEEDS_ADJUDICATION
