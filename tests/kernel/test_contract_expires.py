"""A start deadline (issue 38 item 7, Celery's ``expires``): a run not started by its
``expires_at`` is never started late. Whoever meets it first, a claim, ``claim_next`` or
Beat's upkeep, settles it skipped ``expired`` with its event; a retry keeps the deadline."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from kernel.errors import InvalidArgument
from kernel.states import OccurrenceStatus as S

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness


def _skipped_expired(k: Harness, occ_id: int) -> None:
    occ = k.kernel.get_occurrence(occ_id)
    assert (occ.status, occ.skip_reason) == (S.SKIPPED, "expired")
    last = k.kernel.events(occurrence_id=occ_id)[-1]
    assert (last.type, last.data["reason"]) == ("occurrence_skipped", "expired")
    assert last.data["expires_at"] == occ.to_dict()["expires_at"]
    assert k.event_types(occ_id).count("occurrence_skipped") == 1


def test_a_claim_at_the_deadline_skips_the_run_instead_of_starting_it(k: Harness) -> None:
    [occ_id] = k.occurrences(expires="90s")
    occ = k.kernel.get_occurrence(occ_id)
    assert occ.expires_at == occ.available_at + timedelta(seconds=90)
    blocker = k.kernel.blocker(occ_id)
    assert blocker is not None and blocker.kind == "none"
    deadline = occ.to_dict()["expires_at"]
    assert blocker.text.endswith(f"; expires at {deadline} if not started by then")
    k.clock.advance(90)
    blocker = k.kernel.blocker(occ_id)
    assert blocker is not None and blocker.kind == "expired"
    assert blocker.text.startswith(f"expired at {deadline} before it started")
    # Nothing holds it that a person must free: the watchdog does not call it stranded.
    k.clock.advance(3600)
    assert k.kernel.watchdog(grace=60)["stranded"] == []
    assert k.kernel.dispatch_batch(limit=10) == []  # no hint for it either
    assert k.kernel.claim(occ_id, owner="w1", lease=30) is None
    _skipped_expired(k, occ_id)
    assert k.kernel.skip_expired() == 0  # settled once


def test_a_run_claimed_before_its_deadline_runs(k: Harness) -> None:
    [occ_id] = k.occurrences(expires=60)
    k.clock.advance(59)
    claim = k.kernel.claim(occ_id, owner="w1", lease=30)
    assert claim is not None
    k.clock.advance(25)  # past the deadline: started in time, it no longer applies
    k.kernel.renew(occ_id, owner="w1", fence=claim.fence, lease=30)
    k.kernel.succeed(occ_id, owner="w1", fence=claim.fence)
    assert k.kernel.get_occurrence(occ_id).status == S.SUCCEEDED


def test_beats_upkeep_skips_an_expired_run_no_worker_met(k: Harness) -> None:
    expired = k.occurrences("stale", 2, expires="1m")
    [kept] = k.occurrences("fresh", expires="2m")
    [plain] = k.occurrences("plain")
    k.clock.advance(60)
    assert k.kernel.skip_expired() == 2
    for occ_id in expired:
        _skipped_expired(k, occ_id)
    for occ_id in (kept, plain):
        assert k.kernel.get_occurrence(occ_id).status == S.QUEUED


def test_claim_next_skips_expired_runs_and_takes_the_next(k: Harness) -> None:
    stale = k.occurrences("stale", 20, expires="1m")
    [fresh] = k.occurrences("fresh")
    k.clock.advance(60)
    got = k.kernel.claim_next(owner="w1", lease=30)
    assert got is not None and got.occurrence.id == fresh
    assert k.kernel.claim_next(owner="w1", lease=30) is None
    for occ_id in stale:
        _skipped_expired(k, occ_id)


def test_a_retry_keeps_the_deadline(k: Harness) -> None:
    # Backoff 10s: the retry comes before the deadline, then waits past it (no worker).
    claim = k.running("soon", expires="30s")
    k.kernel.fail(claim.occurrence.id, owner="w1", fence=1, code="E", message="boom")
    # Backoff 10s doubled past the deadline: expired before it may even start again.
    late = k.running("late", expires="25s", retry={"backoff": "40s", "jitter": 0})
    k.clock.advance(5)
    k.kernel.fail(late.occurrence.id, owner="w1", fence=1, code="E", message="boom")
    blocker = k.kernel.blocker(late.occurrence.id)
    assert blocker is not None and blocker.kind == "not_before"
    assert "expires at" in blocker.text
    k.clock.advance(25)
    assert k.kernel.claim(claim.occurrence.id, owner="w2", lease=30) is None
    _skipped_expired(k, claim.occurrence.id)
    assert k.kernel.skip_expired() == 1
    _skipped_expired(k, late.occurrence.id)


def test_an_enqueued_run_takes_expires_as_celery_does(k: Harness) -> None:
    after = k.kernel.enqueue(task="proj.t", expires=30)
    at = k.kernel.enqueue(task="proj.t", expires=k.clock.now + timedelta(seconds=10))
    # Counted from the call, not from the countdown (Celery's reading): never startable.
    delayed = k.kernel.enqueue(task="proj.t", countdown=60, expires=30)
    assert k.kernel.get_occurrence(after.occurrence_id).expires_at == k.clock.now + timedelta(
        seconds=30
    )
    k.clock.advance(10)
    assert k.kernel.claim(at.occurrence_id, owner="w1", lease=30) is None
    _skipped_expired(k, at.occurrence_id)
    k.clock.advance(20)
    assert k.kernel.skip_expired() == 2
    for made in (after, delayed):
        _skipped_expired(k, made.occurrence_id)


@pytest.mark.parametrize("expires", [-1, "30", True, float("nan")])
def test_an_enqueue_refuses_an_expires_it_cannot_read(k: Harness, expires: object) -> None:
    with pytest.raises(InvalidArgument) as refused:
        k.kernel.enqueue(task="proj.t", expires=expires)  # type: ignore[arg-type]
    assert refused.value.field == "expires"
    naive = k.clock.now.replace(tzinfo=None)
    with pytest.raises(InvalidArgument, match="time zone"):
        k.kernel.enqueue(task="proj.t", expires=naive)


def test_a_jobs_expires_is_a_duration_field(k: Harness) -> None:
    assert k.define("a", expires="1h30m").spec["expires"] == 5400.0
    assert "expires" not in k.define("b").spec  # absent: the digest of old jobs is unchanged
    for bad in (0, -5, "soon", [1]):
        with pytest.raises(InvalidArgument) as refused:
            k.define("c", expires=bad)
        assert refused.value.field == "expires"
