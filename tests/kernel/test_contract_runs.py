"""A worker's side: claims, fences, attempts, renew, settle, retries, lease expiry (I2, I4, I6)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from kernel.errors import InvalidArgument, LeaseLost
from kernel.states import OccurrenceStatus as S

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness


def test_claim_fences_and_counts_an_attempt(k: Harness) -> None:
    [occ_id] = k.occurrences()
    claim = k.kernel.claim(occ_id, owner="w1", lease=30)
    assert claim is not None and not claim.resumed and claim.checkpoint is None
    assert (claim.fence, claim.owner, claim.occurrence.attempt) == (1, "w1", 1)
    assert claim.lease_expires_at == k.clock.now + timedelta(seconds=30)
    assert claim.occurrence.status == S.RUNNING

    # A duplicate hint for a running occurrence is dropped without side effects.
    assert k.kernel.claim(occ_id, owner="w2", lease=30) is None
    assert k.kernel.claim(424242, owner="w2", lease=30) is None
    occ = k.kernel.get_occurrence(occ_id)
    assert (occ.fence, occ.lease_owner, occ.attempt) == (1, "w1", 1)
    claimed = [e for e in k.kernel.events(occurrence_id=occ_id) if e.type == "occurrence_claimed"]
    assert [(e.fence, e.data["owner"], e.data["attempt"]) for e in claimed] == [(1, "w1", 1)]
    with pytest.raises(InvalidArgument) as bad_lease:
        k.kernel.claim(occ_id, owner="w2", lease=0)
    assert bad_lease.value.field == "lease"


def test_a_queued_claim_records_what_a_claim_decided_from_a_read_records(k: Harness) -> None:
    """A queued occurrence is claimed by one statement with no read before it: it takes the
    snapshot's own lease, and its event's stored text is the canonical JSON a claim decided
    from a read writes (here a retry's)."""
    import sqlalchemy as sa

    from kernel.db.schema import events
    from kernel.records import dumps

    [occ_id] = k.occurrences(lease=90.7, max_attempts=2)
    claim = k.kernel.claim(occ_id, owner="w1")
    assert claim is not None and claim.fence == 1 and claim.occurrence.attempt == 1
    assert claim.lease_expires_at == k.clock.now + timedelta(milliseconds=90_700)
    k.kernel.fail(occ_id, owner="w1", fence=1, code="E_TEST", message="try again")
    k.clock.advance(11)  # past the 10 s backoff
    again = k.kernel.claim(occ_id, owner="w2", lease=30)
    assert again is not None and again.fence == 2 and again.occurrence.attempt == 2
    with k.kernel.engine.connect() as conn:
        stored = conn.execute(
            sa.select(events.c.data, events.c.fence)
            .where(events.c.occurrence_id == occ_id, events.c.type == "occurrence_claimed")
            .order_by(events.c.id)
        ).all()
    queued = {"attempt": 1, "owner": "w1", "previous_owner": None, "previous_status": "queued"}
    retry = {"attempt": 2, "owner": "w2", "previous_owner": None, "previous_status": "retry_wait"}
    assert [(row.data, row.fence) for row in stored] == [(dumps(queued), 1), (dumps(retry), 2)]


def test_renew_extends_a_live_lease_and_refuses_anyone_else(k: Harness) -> None:
    claim = k.running()
    occ_id = claim.occurrence.id
    k.clock.advance(20)
    answer = k.kernel.renew(occ_id, owner="w1", fence=1, lease=30)
    assert answer.lease_expires_at == k.clock.now + timedelta(seconds=30)
    assert answer.pause is None and not answer.cancel_requested
    for owner, fence in (("w2", 1), ("w1", 2)):
        with pytest.raises(LeaseLost):
            k.kernel.renew(occ_id, owner=owner, fence=fence, lease=30)
    k.clock.advance(31)
    with pytest.raises(LeaseLost) as lost:
        k.kernel.renew(occ_id, owner="w1", fence=1, lease=30)
    assert f"occurrence {occ_id}" in lost.value.message


def test_a_result_json_cannot_hold_or_too_large_is_stored_bounded_saying_so(k: Harness) -> None:
    """A success is settled whatever its value: a value JSON cannot hold (a task returning
    an object) or one past the bound is stored as its type and a bounded repr, saying so,
    instead of raising in the worker and leaving the run to its lease's expiry (issue 40)."""
    from kernel.records import MAX_RESULT_BYTES

    class Opaque:
        def __repr__(self) -> str:
            return "<Opaque " + "x" * 5000 + ">"

    claim = k.running()
    occ_id = claim.occurrence.id
    k.kernel.succeed(occ_id, owner="w1", fence=1, result={"value": Opaque()})
    occ = k.kernel.get_occurrence(occ_id)
    assert occ.status == S.SUCCEEDED
    unstored = occ.result["unstored_result"]
    assert unstored["type"] == "builtins.dict" and "not JSON" in unstored["reason"]
    assert unstored["repr"].startswith("{'value': <Opaque xxx") and len(unstored["repr"]) <= 1000

    [big_id] = k.occurrences()
    k.kernel.claim(big_id, owner="w1", lease=30)
    k.kernel.succeed(big_id, owner="w1", fence=1, result="y" * (MAX_RESULT_BYTES + 1))
    big = k.kernel.get_occurrence(big_id).result["unstored_result"]
    assert big["type"] == "builtins.str" and f"{MAX_RESULT_BYTES}" in big["reason"]


def test_success_settles_once_and_is_never_claimed_again(k: Harness) -> None:
    claim = k.running()
    occ_id = claim.occurrence.id
    k.kernel.succeed(occ_id, owner="w1", fence=1, result={"rows": 3})
    occ = k.kernel.get_occurrence(occ_id)
    assert occ.status == S.SUCCEEDED and occ.result == {"rows": 3}
    assert occ.settled_at == k.clock.now and occ.lease_owner is None
    assert k.kernel.claim(occ_id, owner="w2", lease=30) is None
    with pytest.raises(LeaseLost):
        k.kernel.succeed(occ_id, owner="w1", fence=1)
    assert k.event_types(occ_id) == [
        "occurrence_created",
        "occurrence_claimed",
        "occurrence_succeeded",
    ]


def test_failures_back_off_exponentially_then_dead_letter(k: Harness) -> None:
    [occ_id] = k.occurrences(max_attempts=3)
    for attempt, backoff in ((1, 10), (2, 20)):
        claim = k.kernel.claim(occ_id, owner="w1", lease=30)
        assert claim is not None and claim.occurrence.attempt == attempt
        status = k.kernel.fail(
            occ_id, owner="w1", fence=claim.fence, code="HTTP_503", message="busy"
        )
        occ = k.kernel.get_occurrence(occ_id)
        assert status == "retry_wait" == occ.status
        assert occ.available_at == k.clock.now + timedelta(seconds=backoff)
        assert occ.last_error == {"code": "HTTP_503", "message": "busy"} and occ.settled_at is None
        k.clock.advance(backoff - 1)
        assert k.kernel.claim(occ_id, owner="w1", lease=30) is None
        k.clock.advance(1)
    claim = k.kernel.claim(occ_id, owner="w1", lease=30)
    assert claim is not None and claim.occurrence.attempt == 3
    status = k.kernel.fail(occ_id, owner="w1", fence=claim.fence, code="HTTP_503", message="busy")
    occ = k.kernel.get_occurrence(occ_id)
    assert (
        status == "dead_letter" == occ.status and (occ.last_error or {}).get("code") == "HTTP_503"
    )
    assert occ.settled_at == k.clock.now
    k.clock.advance(3600)
    assert k.kernel.claim(occ_id, owner="w1", lease=30) is None
    retry_events = [e for e in k.kernel.events(occurrence_id=occ_id) if e.type.startswith("occ")]
    assert [e.type for e in retry_events][-2:] == ["occurrence_claimed", "occurrence_dead_letter"]


def test_a_retry_delay_chosen_by_the_job_code_replaces_the_backoff(k: Harness) -> None:
    """A Celery task's ``self.retry(countdown=...)``: that delay, not the policy's 10 s; the
    traceback stays on the row (bounded to its innermost end), out of the event."""
    from kernel.facade.workers import TRACEBACK_LIMIT

    claim = k.running(max_attempts=3)
    occ_id = claim.occurrence.id
    trace = "Traceback (most recent call last):\n" + "  frame\n" * 2000 + "ValueError: x"
    status = k.kernel.fail(
        occ_id, owner="w1", fence=1, code="TASK_RETRY", message="Retry in 2s", retry_in=2.5,
        traceback=trace,
    )  # fmt: skip
    occ = k.kernel.get_occurrence(occ_id)
    assert status == "retry_wait" and occ.available_at == k.clock.now + timedelta(seconds=2.5)
    kept = (occ.last_error or {})["traceback"]
    assert len(kept) == TRACEBACK_LIMIT and kept.startswith("...\n") and kept.endswith("x")
    settled = [
        e for e in k.kernel.events(occurrence_id=occ_id) if e.type == "occurrence_retry_wait"
    ]
    assert settled and "traceback" not in settled[-1].data["error"]


def test_a_non_retryable_failure_dead_letters_at_once(k: Harness) -> None:
    claim = k.running(max_attempts=5)
    occ_id = claim.occurrence.id
    status = k.kernel.fail(
        occ_id, owner="w1", fence=1, code="HTTP_404", message="gone", retryable=False
    )
    assert status == "dead_letter"
    occ = k.kernel.get_occurrence(occ_id)
    assert (occ.attempt, (occ.last_error or {}).get("code")) == (1, "HTTP_404")
    with pytest.raises(InvalidArgument):
        k.kernel.fail(occ_id, owner="w1", fence=1, code="", message="no code")


def test_an_expired_at_least_once_lease_is_reclaimed_and_fences_the_old_owner(k: Harness) -> None:
    claim = k.running(max_attempts=3)
    occ_id = claim.occurrence.id
    k.clock.advance(31)
    assert k.kernel.expire_leases() == {"cancelled": 0, "needs_adjudication": 0, "dead_letter": 0}
    assert k.kernel.get_occurrence(occ_id).status == S.RUNNING

    second = k.kernel.claim(occ_id, owner="w2", lease=30)
    # A lost worker is not the task's failure: the reclaim spends no attempt.
    assert second is not None and (second.fence, second.occurrence.attempt) == (2, 1)
    # Every write of the zombie is refused and changes nothing.
    writes = (
        lambda: k.kernel.renew(occ_id, owner="w1", fence=1, lease=30),
        lambda: k.kernel.succeed(occ_id, owner="w1", fence=1, result="stale"),
        lambda: k.kernel.fail(occ_id, owner="w1", fence=1, code="E", message="stale"),
        lambda: k.kernel.hand_back(
            occ_id, owner="w1", fence=1, safe_point="adapter_checkpoint", checkpoint={"n": 1}
        ),
        lambda: k.kernel.cancelled(occ_id, owner="w1", fence=1),
    )
    for write in writes:
        with pytest.raises(LeaseLost) as lost:
            write()
        assert lost.value.details["current_fence"] == 2
    occ = k.kernel.get_occurrence(occ_id)
    assert (occ.status, occ.fence, occ.lease_owner, occ.result) == (S.RUNNING, 2, "w2", None)
    reclaimed = k.kernel.events(occurrence_id=occ_id)[-1]
    assert reclaimed.type == "occurrence_claimed" and reclaimed.fence == 2
    assert reclaimed.data["previous_owner"] == "w1"
    k.kernel.succeed(occ_id, owner="w2", fence=2)
    assert k.kernel.get_occurrence(occ_id).status == S.SUCCEEDED


def test_an_expired_lease_past_its_lost_leases_dead_letters(k: Harness) -> None:
    claim = k.running(max_lost_leases=0)
    occ_id = claim.occurrence.id
    k.clock.advance(29)
    assert k.kernel.expire_leases()["dead_letter"] == 0
    k.clock.advance(1)
    assert k.kernel.expire_leases()["dead_letter"] == 1
    occ = k.kernel.get_occurrence(occ_id)
    assert occ.status == S.DEAD_LETTER and (occ.last_error or {}).get("code") == "POISON_PILL"
    last = k.kernel.events(occurrence_id=occ_id)[-1]
    assert (last.type, last.fence, last.data["reason"]) == (
        "occurrence_dead_letter",
        1,
        "lease_expired",
    )
    assert k.kernel.claim(occ_id, owner="w2", lease=30) is None
    with pytest.raises(LeaseLost):
        k.kernel.succeed(occ_id, owner="w1", fence=1)


def test_a_claim_settles_an_expired_lease_that_its_expiry_decides(k: Harness) -> None:
    by_id = k.running("by-id", max_lost_leases=0).occurrence.id
    by_next = k.running("by-next", max_lost_leases=0).occurrence.id
    cancelled = k.running("cancelled").occurrence.id
    k.kernel.cancel(cancelled, request_id="cancel-1", operator="ops")
    k.clock.advance(30)
    # No Beat runs expire_leases: the claim path settles them, in its own transaction.
    assert k.kernel.claim(by_id, owner="w2", lease=30) is None
    assert k.kernel.get_occurrence(by_id).status == S.DEAD_LETTER
    assert k.kernel.claim_next(owner="w2", lease=30) is None
    assert k.kernel.get_occurrence(cancelled).status == S.CANCELLED
    for occ_id in (by_id, by_next):
        occ = k.kernel.get_occurrence(occ_id)
        assert occ.status == S.DEAD_LETTER
        assert (occ.last_error or {}).get("code") == "POISON_PILL"
        last = k.kernel.events(occurrence_id=occ_id)[-1]
        assert (last.type, last.fence, last.data["reason"]) == (
            "occurrence_dead_letter",
            1,
            "lease_expired",
        )
    assert k.kernel.expire_leases() == {"cancelled": 0, "needs_adjudication": 0, "dead_letter": 0}
    with pytest.raises(LeaseLost):
        k.kernel.succeed(by_id, owner="w1", fence=1)


def test_an_expired_at_most_once_lease_needs_adjudication_and_is_never_claimable(
    k: Harness,
) -> None:
    claim = k.running(delivery="at-most-once", max_attempts=3)
    occ_id = claim.occurrence.id
    k.clock.advance(30)
    # The claim is refused and settles the expired lease as lease expiry would.
    assert k.kernel.claim(occ_id, owner="w2", lease=30) is None
    assert k.kernel.claim_next(owner="w2", lease=30) is None
    assert k.kernel.dispatch_batch() == []
    assert k.kernel.expire_leases()["needs_adjudication"] == 0
    occ = k.kernel.get_occurrence(occ_id)
    assert (
        occ.status == S.NEEDS_ADJUDICATION and (occ.last_error or {}).get("code") == "LEASE_EXPIRED"
    )
    assert occ.settled_at is None
    k.clock.advance(3600)
    assert k.kernel.claim(occ_id, owner="w2", lease=30) is None
    assert k.kernel.claim_next(owner="w2", lease=30) is None
    assert k.kernel.dispatch_batch() == []
    assert k.kernel.expire_leases()["needs_adjudication"] == 0


def test_hand_back_then_claim_resumes_without_an_attempt(k: Harness) -> None:
    claim = k.running(max_attempts=1)
    occ_id = claim.occurrence.id
    k.kernel.hand_back(
        occ_id, owner="w1", fence=1, safe_point="adapter_checkpoint", checkpoint={"page": 7}
    )
    occ = k.kernel.get_occurrence(occ_id)
    assert occ.status == S.RETRY_WAIT and occ.available_at == k.clock.now
    assert occ.control is not None and occ.control.state == "resumed"
    assert k.kernel.get_occurrence(occ_id).checkpoint == {"page": 7}
    with pytest.raises(LeaseLost):
        k.kernel.renew(occ_id, owner="w1", fence=1, lease=30)

    # max_attempts is 1 and the first attempt is spent: only a free claim can take it.
    resumed = k.kernel.claim(occ_id, owner="w2", lease=30)
    assert resumed is not None and resumed.resumed and resumed.checkpoint == {"page": 7}
    assert (resumed.fence, resumed.occurrence.attempt) == (2, 1)
    assert k.event_types(occ_id)[-2:] == ["occurrence_handed_back", "occurrence_claimed"]
    assert k.kernel.events(occurrence_id=occ_id)[-1].data["resumed"] is True
    k.kernel.succeed(occ_id, owner="w2", fence=2)
    assert k.kernel.get_occurrence(occ_id).control.state == "terminal"  # type: ignore[union-attr]


def test_renew_stores_the_checkpoint_fenced_and_a_reclaim_resumes_from_it(k: Harness) -> None:
    """A checkpoint rides on the renewal: stored only under the live lease, the newest one
    wins, a renewal without one keeps it, and the next claim after the lease expired hands
    it over (no attempt spent, as by any reclaim)."""
    claim = k.running(max_attempts=3)
    occ_id = claim.occurrence.id
    k.kernel.renew(occ_id, owner="w1", fence=1, lease=30, checkpoint={"done": 1})
    k.kernel.renew(occ_id, owner="w1", fence=1, lease=30, checkpoint={"done": 2})
    k.kernel.renew(occ_id, owner="w1", fence=1, lease=30)  # nothing new since the last one
    running = k.kernel.get_occurrence(occ_id)
    assert (running.status, running.checkpoint, running.control) == (S.RUNNING, {"done": 2}, None)
    # A stale holder's checkpoint is refused with its renewal and changes nothing.
    for owner, fence in (("w2", 1), ("w1", 2)):
        with pytest.raises(LeaseLost):
            k.kernel.renew(occ_id, owner=owner, fence=fence, lease=30, checkpoint={"done": 99})
    assert k.kernel.get_occurrence(occ_id).checkpoint == {"done": 2}

    k.clock.advance(31)  # the worker died: its lease expires
    with pytest.raises(LeaseLost):
        k.kernel.renew(occ_id, owner="w1", fence=1, lease=30, checkpoint={"done": 3})
    again = k.kernel.claim(occ_id, owner="w2", lease=30)
    assert again is not None and again.fence == 2 and again.checkpoint == {"done": 2}
    assert not again.resumed and again.occurrence.attempt == 1
    with pytest.raises(LeaseLost):  # the old holder, fenced by the reclaim
        k.kernel.renew(occ_id, owner="w1", fence=1, lease=30, checkpoint={"done": 3})
    k.kernel.renew(occ_id, owner="w2", fence=2, lease=30, checkpoint={"done": 4})
    assert k.kernel.get_occurrence(occ_id).checkpoint == {"done": 4}


def test_a_hand_back_after_progress_resumes_from_the_hand_back(k: Harness) -> None:
    """The newest checkpoint wins whichever act stored it: progress, then a hand back."""
    claim = k.running()
    occ_id = claim.occurrence.id
    k.kernel.renew(occ_id, owner="w1", fence=1, lease=30, checkpoint={"done": 1})
    k.kernel.hand_back(
        occ_id, owner="w1", fence=1, safe_point="adapter_checkpoint", checkpoint={"done": 2}
    )
    resumed = k.kernel.claim(occ_id, owner="w2", lease=30)
    assert resumed is not None and resumed.resumed and resumed.checkpoint == {"done": 2}
    k.kernel.renew(occ_id, owner="w2", fence=2, lease=30, checkpoint={"done": 3})
    k.clock.advance(31)
    reclaimed = k.kernel.claim(occ_id, owner="w3", lease=30)
    assert reclaimed is not None and reclaimed.checkpoint == {"done": 3}


def test_a_renewed_checkpoint_over_64_kib_is_refused(k: Harness) -> None:
    claim = k.running()
    occ_id = claim.occurrence.id
    with pytest.raises(InvalidArgument) as refused:
        k.kernel.renew(occ_id, owner="w1", fence=1, lease=30, checkpoint={"blob": "x" * 65536})
    assert refused.value.field == "checkpoint"
    assert k.kernel.get_occurrence(occ_id).checkpoint is None


def test_a_checkpoint_over_64_kib_is_refused(k: Harness) -> None:
    claim = k.running()
    occ_id = claim.occurrence.id
    with pytest.raises(InvalidArgument) as refused:
        k.kernel.hand_back(
            occ_id,
            owner="w1",
            fence=1,
            safe_point="adapter_checkpoint",
            checkpoint={"blob": "x" * (64 * 1024)},
        )
    assert refused.value.field == "checkpoint"
    occ = k.kernel.get_occurrence(occ_id)
    assert occ.status == S.RUNNING and occ.control is None
    # Exactly at the limit is fine: 64 KiB of canonical JSON.
    fits = "x" * (64 * 1024 - len('{"blob":""}'))
    k.kernel.hand_back(
        occ_id, owner="w1", fence=1, safe_point="adapter_checkpoint", checkpoint={"blob": fits}
    )
    assert k.kernel.get_occurrence(occ_id).checkpoint == {"blob": fits}


def test_claim_next_takes_the_oldest_claimable_matching_the_filters(k: Harness) -> None:
    first, second = k.occurrences("a", 2)
    k.define("b", queue="reports", kind="shell", payload={"argv": ["true"]})
    [other] = k.fire("b").created
    got = k.kernel.claim_next(owner="w1", lease=30, queues=["reports"])
    assert got is not None and got.occurrence.id == other
    got = k.kernel.claim_next(owner="w1", lease=30, kinds=["callable"])
    assert got is not None and got.occurrence.id == first
    got = k.kernel.claim_next(owner="w1", lease=30)
    assert got is not None and got.occurrence.id == second
    assert k.kernel.claim_next(owner="w1", lease=30) is None
    # An expired at-least-once lease is claimable again through claim_next too.
    k.clock.advance(31)
    got = k.kernel.claim_next(owner="w2", lease=30, queues=["reports"])
    assert got is not None and (got.occurrence.id, got.fence) == (other, 2)


def test_a_retry_runs_with_the_arguments_the_job_code_gave_it(k: Harness) -> None:
    """Celery's ``self.retry(args=..., kwargs=...)``: the retry's claim hands over the new
    arguments (stored by the settle that scheduled it, fenced); the rest of the run's
    definition is kept. A failure that dead-letters, or a stale fence, stores nothing."""
    made = k.kernel.enqueue(task="proj.add", args=[1, 2], kwargs={"label": "kept"},
                            settings={"max_attempts": 3})  # fmt: skip
    occ_id = made.occurrence_id
    claim = k.kernel.claim(occ_id, owner="w1", lease=30)
    assert claim is not None
    new = {"args": [2, 3], "kwargs": {"label": "kept"}}
    with pytest.raises(LeaseLost):
        k.kernel.fail(occ_id, owner="w1", fence=claim.fence + 1, code="TASK_RETRY",
                      message="retry", retry_with={"args": [9], "kwargs": {}})  # fmt: skip
    before = k.kernel.get_occurrence(occ_id).definition
    status = k.kernel.fail(occ_id, owner="w1", fence=claim.fence, code="TASK_RETRY",
                           message="retry", retry_in=0, retry_with=new)  # fmt: skip
    assert status == "retry_wait"
    again = k.kernel.claim(occ_id, owner="w1", lease=30)
    assert again is not None and again.occurrence.attempt == 2
    assert again.occurrence.payload == {"task": "proj.add", **new}
    after = k.kernel.get_occurrence(occ_id).definition
    assert {**after, "payload": None} == {**before, "payload": None}
    # The last attempt's retry dead-letters: its arguments are not stored.
    k.kernel.fail(occ_id, owner="w1", fence=again.fence, code="TASK_RETRY", message="retry",
                  retry_in=0, retry_with={"args": [7], "kwargs": {}})  # fmt: skip
    last = k.kernel.claim(occ_id, owner="w1", lease=30)
    assert last is not None and last.occurrence.payload["args"] == [7]
    k.kernel.fail(occ_id, owner="w1", fence=last.fence, code="TASK_RETRY", message="retry",
                  retry_in=0, retry_with={"args": [8], "kwargs": {}})  # fmt: skip
    occ = k.kernel.get_occurrence(occ_id)
    assert occ.status == "dead_letter" and occ.payload["args"] == [7]


def test_a_retrys_new_arguments_are_checked_as_an_enqueues(k: Harness) -> None:
    """Arguments JSON cannot carry, or too large, are refused by name and change nothing;
    a run that is not a task's has no arguments to change."""
    made = k.kernel.enqueue(task="proj.add", args=[1], settings={"max_attempts": 3})
    claim = k.kernel.claim(made.occurrence_id, owner="w1", lease=30)
    assert claim is not None
    for bad, field in (
        ({"args": [{1, 2}], "kwargs": {}}, "retry_with.args[0]"),
        ({"args": ["x" * (70 * 1024)], "kwargs": {}}, "retry_with.args"),
        ({"args": [], "kwargs": {}, "queue": "q"}, "retry_with"),
    ):
        with pytest.raises(InvalidArgument) as refused:
            k.kernel.fail(made.occurrence_id, owner="w1", fence=claim.fence, code="TASK_RETRY",
                          message="retry", retry_with=bad)  # fmt: skip
        assert refused.value.field == field
    assert k.kernel.get_occurrence(made.occurrence_id).status == "running"
    other = k.running(max_attempts=3)
    with pytest.raises(InvalidArgument) as not_a_task:
        k.kernel.fail(other.occurrence.id, owner="w1", fence=other.fence, code="X",
                      message="x", retry_with={"args": [], "kwargs": {}})  # fmt: skip
    assert not_a_task.value.field == "retry_with"
