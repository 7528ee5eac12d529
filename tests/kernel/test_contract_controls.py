"""Runtime controls: pause at a safe point, resume from the checkpoint, cancel (SPEC §4)."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

import pytest
import sqlalchemy as sa

from kernel.errors import (
    FenceConflict,
    LeaseLost,
    PauseUnsupported,
    RevisionConflict,
    StateConflict,
)
from kernel.states import OccurrenceStatus as S

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness

SAFE_POINTS = ("before_execute", "adapter_checkpoint")


def pause(k: Harness, occ_id: int, fence: int = 1, request_id: str = "pause-1") -> None:
    k.kernel.request_pause(
        occ_id, expected_fence=fence, request_id=request_id, safe_points=SAFE_POINTS, operator="ops"
    )


def test_pause_ack_resume_resumes_from_the_checkpoint_without_an_attempt(k: Harness) -> None:
    claim = k.running(max_attempts=1)
    occ_id = claim.occurrence.id
    result = k.kernel.request_pause(
        occ_id, expected_fence=1, request_id="pause-1", safe_points=SAFE_POINTS, operator="ops"
    )
    assert not result.deduplicated
    control = result.occurrence.control
    assert control is not None and (control.state, control.expected_fence) == ("pause_requested", 1)

    answer = k.kernel.renew(occ_id, owner="w1", fence=1, lease=30)
    assert answer.pause is not None and answer.pause.request_id == "pause-1"
    assert set(answer.pause.safe_points) == set(SAFE_POINTS)
    k.kernel.ack_pause(
        occ_id,
        owner="w1",
        fence=1,
        request_id="pause-1",
        expected_revision=answer.pause.revision,
        safe_point="adapter_checkpoint",
        checkpoint={"cursor": 41},
    )
    occ = k.kernel.get_occurrence(occ_id)
    assert occ.status == S.RETRY_WAIT and occ.control is not None
    assert occ.control.state == "paused" and occ.checkpoint == {"cursor": 41}

    # Paused: not claimable, not hinted, listed for dashboards; time does not change that.
    k.clock.advance(3600)
    assert k.kernel.claim(occ_id, owner="w2", lease=30) is None
    assert k.kernel.claim_next(owner="w2", lease=30) is None
    assert k.kernel.dispatch_batch() == []
    assert [(c["id"], c["state"]) for c in k.kernel.runtime_controls()] == [(occ_id, "paused")]
    assert k.kernel.status()["paused"] == 1

    resumed = k.kernel.resume(
        occ_id, request_id="resume-1", operator="ops", expected_revision=occ.control.revision
    )
    assert resumed.occurrence.control is not None
    assert resumed.occurrence.control.state == "resumed"
    assert [h.occurrence_id for h in k.kernel.dispatch_batch()] == [occ_id]
    again = k.kernel.claim(occ_id, owner="w2", lease=30)
    assert again is not None and again.resumed and again.checkpoint == {"cursor": 41}
    assert (again.fence, again.occurrence.attempt) == (2, 1)
    assert k.event_types(occ_id)[2:] == [
        "occurrence_pause_requested",
        "occurrence_paused",
        "occurrence_resumed",
        "occurrence_claimed",
    ]
    paused_event = k.kernel.events(occurrence_id=occ_id)[3]
    assert (paused_event.fence, paused_event.data["request_id"]) == (1, "pause-1")
    # The resumed run can be paused again, under its own fence.
    pause(k, occ_id, fence=2, request_id="pause-2")
    answer = k.kernel.renew(occ_id, owner="w2", fence=2, lease=30)
    assert answer.pause is not None and answer.pause.request_id == "pause-2"


def test_a_pause_request_is_refused_unless_running_under_that_fence_with_a_live_lease(
    k: Harness,
) -> None:
    [queued] = k.occurrences("idle")
    with pytest.raises(StateConflict) as not_running:
        pause(k, queued, fence=0)
    assert str(queued) in not_running.value.message

    claim = k.running()
    occ_id = claim.occurrence.id
    with pytest.raises(FenceConflict) as stale:
        pause(k, occ_id, fence=2)
    assert stale.value.details == {"occurrence_id": occ_id, "expected_fence": 2, "actual_fence": 1}
    with pytest.raises(PauseUnsupported) as unsupported:
        k.kernel.request_pause(
            occ_id, expected_fence=1, request_id="p-shell", safe_points=(), operator="ops"
        )
    assert str(occ_id) in unsupported.value.message

    pause(k, occ_id)
    with pytest.raises(StateConflict) as twice:
        pause(k, occ_id, request_id="pause-2")
    assert "pause_requested" in twice.value.message

    other = k.running("other")
    k.clock.advance(30)
    with pytest.raises(LeaseLost):
        pause(k, other.occurrence.id, request_id="pause-3")
    # None of the refusals wrote a control or an event.
    assert k.kernel.get_occurrence(other.occurrence.id).control is None
    assert "occurrence_pause_requested" not in k.event_types(other.occurrence.id)
    assert k.event_types(occ_id).count("occurrence_pause_requested") == 1


def test_ack_pause_checks_revision_request_and_safe_point(k: Harness) -> None:
    claim = k.running()
    occ_id = claim.occurrence.id
    k.kernel.request_pause(
        occ_id,
        expected_fence=1,
        request_id="pause-1",
        safe_points=["before_execute"],
        operator="ops",
    )
    revision = k.kernel.get_occurrence(occ_id).control.revision  # type: ignore[union-attr]
    ack: dict[str, Any] = {"owner": "w1", "fence": 1, "checkpoint": None}
    with pytest.raises(RevisionConflict) as stale:
        k.kernel.ack_pause(
            occ_id,
            request_id="pause-1",
            expected_revision=revision + 1,
            safe_point="before_execute",
            **ack,
        )
    assert stale.value.details["actual_revision"] == revision
    with pytest.raises(StateConflict):
        k.kernel.ack_pause(
            occ_id,
            request_id="pause-other",
            expected_revision=revision,
            safe_point="before_execute",
            **ack,
        )
    with pytest.raises(PauseUnsupported):
        k.kernel.ack_pause(
            occ_id,
            request_id="pause-1",
            expected_revision=revision,
            safe_point="adapter_checkpoint",
            **ack,
        )
    with pytest.raises(LeaseLost):
        k.kernel.ack_pause(
            occ_id,
            owner="w2",
            fence=1,
            checkpoint=None,
            request_id="pause-1",
            expected_revision=revision,
            safe_point="before_execute",
        )
    occ = k.kernel.get_occurrence(occ_id)
    assert occ.status == S.RUNNING and occ.control.state == "pause_requested"  # type: ignore[union-attr]
    k.kernel.ack_pause(
        occ_id, request_id="pause-1", expected_revision=revision, safe_point="before_execute", **ack
    )
    assert k.kernel.get_occurrence(occ_id).control.state == "paused"  # type: ignore[union-attr]


def test_a_pause_request_is_rebound_to_the_next_claim_after_the_lease_expired(k: Harness) -> None:
    claim = k.running()
    occ_id = claim.occurrence.id
    pause(k, occ_id)
    k.clock.advance(31)
    second = k.kernel.claim(occ_id, owner="w2", lease=30)
    assert second is not None and second.fence == 2
    control = k.kernel.get_occurrence(occ_id).control
    assert control is not None and (control.state, control.expected_fence) == ("pause_requested", 2)
    answer = k.kernel.renew(occ_id, owner="w2", fence=2, lease=30)
    assert answer.pause is not None and answer.pause.request_id == "pause-1"
    with pytest.raises(LeaseLost):
        k.kernel.ack_pause(
            occ_id,
            owner="w1",
            fence=1,
            request_id="pause-1",
            expected_revision=None,
            safe_point="before_execute",
            checkpoint=None,
        )
    k.kernel.ack_pause(
        occ_id,
        owner="w2",
        fence=2,
        request_id="pause-1",
        expected_revision=answer.pause.revision,
        safe_point="before_execute",
        checkpoint={"step": 2},
    )
    occ = k.kernel.get_occurrence(occ_id)
    assert (
        occ.control is not None
        and occ.control.state == "paused"
        and occ.control.expected_fence == 2
    )


def test_the_control_becomes_terminal_when_the_occurrence_settles(k: Harness) -> None:
    claim = k.running()
    occ_id = claim.occurrence.id
    pause(k, occ_id)
    k.kernel.succeed(occ_id, owner="w1", fence=1)
    occ = k.kernel.get_occurrence(occ_id)
    assert occ.status == S.SUCCEEDED and occ.control is not None
    assert occ.control.state == "terminal"
    assert k.kernel.runtime_controls() == []
    with pytest.raises(StateConflict):
        k.kernel.resume(occ_id, request_id="resume-1", operator="ops")


def test_resume_refuses_what_is_not_paused_and_a_stale_revision(k: Harness) -> None:
    claim = k.running()
    occ_id = claim.occurrence.id
    with pytest.raises(StateConflict) as not_paused:
        k.kernel.resume(occ_id, request_id="resume-0", operator="ops")
    assert str(occ_id) in not_paused.value.message
    pause(k, occ_id)
    k.kernel.ack_pause(
        occ_id,
        owner="w1",
        fence=1,
        request_id="pause-1",
        expected_revision=None,
        safe_point="before_execute",
        checkpoint=None,
    )
    revision = k.kernel.get_occurrence(occ_id).control.revision  # type: ignore[union-attr]
    with pytest.raises(RevisionConflict):
        k.kernel.resume(
            occ_id, request_id="resume-1", operator="ops", expected_revision=revision - 1
        )
    assert k.kernel.get_occurrence(occ_id).control.state == "paused"  # type: ignore[union-attr]


def test_cancel_a_queued_occurrence_settles_it_at_once(k: Harness) -> None:
    [occ_id] = k.occurrences()
    result = k.kernel.cancel(occ_id, request_id="cancel-1", operator="ops")
    assert result.occurrence.status == S.CANCELLED and result.occurrence.settled_at == k.clock.now
    assert k.kernel.claim(occ_id, owner="w1", lease=30) is None
    last = k.kernel.events(occurrence_id=occ_id)[-1]
    assert (last.type, last.data["reason"]) == ("occurrence_cancelled", "operator:ops")
    with pytest.raises(StateConflict) as settled:
        k.kernel.cancel(occ_id, request_id="cancel-2", operator="ops")
    assert "cancelled" in settled.value.message


def test_cancel_a_running_occurrence_asks_the_holder_which_then_settles(k: Harness) -> None:
    claim = k.running()
    occ_id = claim.occurrence.id
    result = k.kernel.cancel(occ_id, request_id="cancel-1", operator="ops")
    assert result.occurrence.status == S.RUNNING and result.occurrence.cancel_requested
    assert k.kernel.renew(occ_id, owner="w1", fence=1, lease=30).cancel_requested
    k.clock.advance(31)
    # Refused, and settled by the claim as lease expiry would have.
    assert k.kernel.claim(occ_id, owner="w2", lease=30) is None
    assert k.kernel.dispatch_batch() == []
    with pytest.raises(LeaseLost):
        k.kernel.cancelled(occ_id, owner="w1", fence=1)
    assert k.kernel.expire_leases()["cancelled"] == 0
    assert k.kernel.get_occurrence(occ_id).status == S.CANCELLED

    live = k.running("live")
    k.kernel.cancel(live.occurrence.id, request_id="cancel-2", operator="ops")
    k.kernel.cancelled(live.occurrence.id, owner="w1", fence=1)
    occ = k.kernel.get_occurrence(live.occurrence.id)
    assert occ.status == S.CANCELLED and (occ.last_error or {}).get("code") == "CANCELLED"
    assert k.event_types(live.occurrence.id)[-2:] == [
        "occurrence_cancel_requested",
        "occurrence_cancelled",
    ]


def test_a_warm_hand_back_honours_a_pending_pause_or_cancel(k: Harness) -> None:
    paused = k.running("paused").occurrence.id
    pause(k, paused)
    k.kernel.hand_back(
        paused, owner="w1", fence=1, safe_point="adapter_checkpoint", checkpoint={"n": 3}
    )
    occ = k.kernel.get_occurrence(paused)
    assert occ.control is not None and occ.control.state == "paused"
    assert occ.checkpoint == {"n": 3}
    assert k.kernel.claim(paused, owner="w2", lease=30) is None

    cancelled = k.running("cancelled").occurrence.id
    k.kernel.cancel(cancelled, request_id="cancel-1", operator="ops")
    k.kernel.hand_back(
        cancelled, owner="w1", fence=1, safe_point="adapter_checkpoint", checkpoint=None
    )
    assert k.kernel.get_occurrence(cancelled).status == S.CANCELLED


def test_a_paused_occurrence_can_be_cancelled(k: Harness) -> None:
    occ_id = k.running().occurrence.id
    pause(k, occ_id)
    k.kernel.ack_pause(
        occ_id,
        owner="w1",
        fence=1,
        request_id="pause-1",
        expected_revision=None,
        safe_point="before_execute",
        checkpoint=None,
    )
    result = k.kernel.cancel(occ_id, request_id="cancel-1", operator="ops")
    assert result.occurrence.status == S.CANCELLED
    assert result.occurrence.control is not None
    assert result.occurrence.control.state == "terminal"
    assert k.kernel.runtime_controls() == []
    assert k.kernel.status()["paused"] == 0


def test_a_reclaim_after_a_pause_request_or_a_resume_spends_no_attempt(k: Harness) -> None:
    # Asked to pause, then the lease expired on the last attempt: reclaimed, no attempt spent.
    asked = k.running("asked", max_attempts=1).occurrence.id
    pause(k, asked)
    # Claimed from a resumed control (a warm hand back), then the lease expired.
    handed = k.running("handed", max_attempts=1).occurrence.id
    k.kernel.hand_back(
        handed, owner="w1", fence=1, safe_point="adapter_checkpoint", checkpoint={"n": 3}
    )
    resumed = k.kernel.claim(handed, owner="w2", lease=30)
    assert resumed is not None and resumed.resumed and resumed.occurrence.attempt == 1
    k.clock.advance(31)
    assert k.kernel.expire_leases()["dead_letter"] == 0
    assert {k.kernel.get_occurrence(i).status for i in (asked, handed)} == {S.RUNNING}

    again = k.kernel.claim(asked, owner="w3", lease=30)
    assert again is not None and (again.fence, again.occurrence.attempt) == (2, 1)
    control = again.occurrence.control
    assert control is not None and (control.state, control.expected_fence) == ("pause_requested", 2)
    reclaimed = k.kernel.claim_next(owner="w3", lease=30)
    assert reclaimed is not None and reclaimed.occurrence.id == handed
    assert (reclaimed.fence, reclaimed.occurrence.attempt) == (3, 1)
    assert reclaimed.resumed and reclaimed.checkpoint == {"n": 3}
    claimed = [e for e in k.kernel.events(occurrence_id=handed) if e.type == "occurrence_claimed"]
    assert [(e.fence, e.data["attempt"], e.data.get("resumed")) for e in claimed] == [
        (1, 1, None),
        (2, 1, True),
        (3, 1, True),
    ]

    # A plain run with no lost lease left is dead-lettered when its lease expires.
    plain = k.running("plain", max_lost_leases=0).occurrence.id
    k.clock.advance(31)
    assert k.kernel.expire_leases()["dead_letter"] == 1
    assert k.kernel.get_occurrence(plain).status == S.DEAD_LETTER
    assert {k.kernel.get_occurrence(i).status for i in (asked, handed)} == {S.RUNNING}


def test_the_checkpoint_is_stored_in_an_envelope_and_the_paused_event_has_its_digest(
    k: Harness,
) -> None:
    occ_id = k.running().occurrence.id
    pause(k, occ_id)
    k.kernel.ack_pause(
        occ_id,
        owner="w1",
        fence=1,
        request_id="pause-1",
        expected_revision=None,
        safe_point="adapter_checkpoint",
        checkpoint={"cursor": 41},
    )
    query = sa.text("SELECT checkpoint FROM controls WHERE occurrence_id = :id")
    with k.kernel.engine.begin() as conn:
        stored = conn.execute(query, {"id": occ_id}).scalar_one()
    envelope = {"schema_version": 1, "safe_point": "adapter_checkpoint", "data": {"cursor": 41}}
    assert json.loads(stored) == envelope
    paused = k.kernel.events(occurrence_id=occ_id)[-1]
    assert paused.type == "occurrence_paused"
    assert paused.data["checkpoint_digest"] == hashlib.sha256(stored.encode()).hexdigest()
    # Callers see the data only.
    assert k.kernel.get_occurrence(occ_id).checkpoint == {"cursor": 41}
    k.kernel.resume(occ_id, request_id="resume-1", operator="ops")
    # A row written before the envelope holds the data itself, and still reads (revision
    # 0012 copied the controls' checkpoints, as they were, into their occurrences).
    with k.kernel.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE occurrences SET checkpoint = :c WHERE id = :id"),
            {"c": '{"cursor":40}', "id": occ_id},
        )
    claim = k.kernel.claim(occ_id, owner="w2", lease=30)
    assert claim is not None and claim.resumed and claim.checkpoint == {"cursor": 40}
