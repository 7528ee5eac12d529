"""Notifications: recorded once per run and event by its settle, one try at a time, retried
with backoff."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from kernel.errors import StateConflict
from kernel.store import Kernel
from tests.kernel.interleave import Actors, race_rounds, refusals_are_kernel_errors

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness

NOTIFY = {"on": ["failed"], "task": "hooks.failed", "backoff": "10s", "attempts": 2}


def _failed_run(k: Harness, job: str = "job", *, retryable: bool) -> tuple[int, int]:
    claim = k.running(job)
    occ = claim.occurrence.id
    k.kernel.fail(occ, owner="w1", fence=claim.fence, code="X", message="x", retryable=retryable)
    return occ, claim.fence


def _recorded(kernel: Kernel, occ: int, fence: int) -> int | None:
    """The pending notification the run's settle recorded, if any."""
    made = kernel.run_notifications(occ, fence)
    assert len(made) <= 1
    return made[0].id if made else None


def test_a_failed_run_records_one_notification(k: Harness) -> None:
    k.define("job", notify=NOTIFY)
    occ, fence = _failed_run(k, retryable=True)
    made = _recorded(k.kernel, occ, fence)
    assert made is not None
    assert _recorded(k.kernel, occ, fence + 1) is None  # a run that did not happen
    notification = k.kernel.notification(made)
    assert (notification.state, notification.tries, notification.event) == ("pending", 0, "failed")
    assert notification.body["occurrence_id"] == occ
    assert (notification.body["status"], notification.body["error"]["code"]) == ("retry_wait", "X")
    recorded = [e for e in k.kernel.events(occurrence_id=occ) if e.type == "notification_recorded"]
    assert [(e.fence, e.data["notification_id"]) for e in recorded] == [(fence, made)]


def test_a_succeeded_run_records_nothing(k: Harness) -> None:
    claim = k.running("job", notify=NOTIFY)
    k.kernel.succeed(claim.occurrence.id, owner="w1", fence=claim.fence)
    assert _recorded(k.kernel, claim.occurrence.id, claim.fence) is None


def test_a_claim_that_settles_an_expired_run_leaves_its_notification_to_be_found(
    k: Harness,
) -> None:
    # A worker's claim that finds the lease of a run with no lost leases left dead-letters
    # it as Beat's expiry would; the refused claimant finds what that settle recorded by
    # the occurrence alone (the lost worker's fence is not the claimant's to know).
    claim = k.running("job", lease=5, notify=NOTIFY, max_attempts=1, max_lost_leases=0)
    occ = claim.occurrence.id
    k.clock.advance(6)
    assert k.kernel.claim(occ, owner="w2", lease=30) is None
    assert k.kernel.get_occurrence(occ).status.value == "dead_letter"
    [made] = k.kernel.run_notifications(occ)
    assert (made.fence, made.event, made.body["status"]) == (claim.fence, "failed", "dead_letter")
    assert k.kernel.run_notifications(occ, claim.fence) == [made]
    assert k.kernel.run_notifications(occ, claim.fence + 1) == []


def test_tries_back_off_and_give_up_after_the_attempts(k: Harness) -> None:
    k.define("job", notify=NOTIFY)
    occ, fence = _failed_run(k, retryable=False)
    made = _recorded(k.kernel, occ, fence)
    assert made is not None
    first = k.kernel.claim_notification(made)
    assert first is not None and first.token is not None and first.tries == 1
    assert k.kernel.claim_notification(made) is None  # one try at a time
    again = k.kernel.notification_failed(first, error="HTTP_500: down", retryable=True)
    assert again.state == "pending"
    assert (again.next_at - k.clock.now).total_seconds() == 10
    assert k.kernel.claim_notification(made) is None  # not due yet
    k.clock.advance(10)
    second = k.kernel.claim_notification(made)
    assert second is not None and second.tries == 2
    with pytest.raises(StateConflict):  # the first try's token no longer holds it
        k.kernel.notification_delivered(made, token=str(first.token))
    given_up = k.kernel.notification_failed(second, error="HTTP_500: down", retryable=True)
    assert (given_up.state, given_up.last_error) == ("failed", "HTTP_500: down")
    failed = [e.data for e in k.kernel.events(occurrence_id=occ) if e.type == "notification_failed"]
    assert [(d["tries"], d["gave_up"]) for d in failed] == [(1, False), (2, True)]
    assert k.kernel.due_notifications() == []


def test_a_delivered_notification_is_not_tried_again(k: Harness) -> None:
    k.define("job", notify=NOTIFY)
    occ, fence = _failed_run(k, retryable=True)
    made = _recorded(k.kernel, occ, fence)
    assert made is not None
    assert [n.id for n in k.kernel.due_notifications()] == [made]
    taken = k.kernel.claim_notification(made)
    assert taken is not None and taken.token is not None
    k.kernel.notification_delivered(made, token=taken.token)
    assert k.kernel.notification(made).state == "delivered"
    assert k.kernel.claim_notification(made) is None
    types = [e.type for e in k.kernel.events(occurrence_id=occ)]
    assert types[-2:] == ["notification_recorded", "notification_delivered"]


@pytest.fixture
def actors(k: Harness) -> Iterator[Actors]:
    made = Actors(k.url, [k.clock, k.clock])
    yield made
    made.close()


def test_beat_and_a_claim_meeting_one_expired_lease_notify_once(k: Harness, actors: Actors) -> None:
    # Beat's expiry and a claim that meets the same expired lease, released together:
    # one dead letter, one notification, and one worker takes its try.
    k.define("job", notify={**NOTIFY, "on": ["dead_letter"]}, max_lost_leases=0)
    for i in range(race_rounds(k.backend == "postgres", 20)):
        claim = k.running("job")
        occ = claim.occurrence.id
        k.clock.advance(31)
        settled: list[Any] = actors.run(
            lambda kk: kk.expire_leases()["dead_letter"],
            lambda kk, o=occ: kk.claim(o, owner="w2", lease=30),
        )
        refusals_are_kernel_errors(settled)
        assert settled[1].value is None, (i, settled)
        assert k.kernel.get_occurrence(occ).status == "dead_letter"
        dead = [e for e in k.event_types(occ) if e == "occurrence_dead_letter"]
        assert len(dead) == 1, (i, settled)
        made = k.kernel.run_notifications(occ, claim.fence)
        assert [n.event for n in made] == ["dead_letter"], (i, settled)
        claims = actors.run(
            lambda kk, n=made[0].id: kk.claim_notification(n),
            lambda kk, n=made[0].id: kk.claim_notification(n),
        )
        refusals_are_kernel_errors(claims)
        assert len([c for c in claims if c.value is not None]) == 1, (i, claims)
