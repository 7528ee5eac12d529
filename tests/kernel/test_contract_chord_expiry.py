"""A chord's member skipped ``expired`` (issue 40): its start deadline (Celery's
``expires``) passed before any worker started it. As Celery's worker revokes an expired
task (its chord fails, its own ``link_error`` is not called, its chain's later steps are
never applied), the skip fails the chord once in its own transaction: the body's
errbacks made once, ``chord_failed`` with reason ``expired``, the body never; the
member's callbacks and errbacks are not made. Whoever meets the deadline: Beat's upkeep
(``skip_expired``) or a claim. On SQLite and PostgreSQL."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kernel import EnqueueRequest
from kernel.states import OccurrenceStatus as S

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness

ERRBACK = {"task": "proj.on_chord_error", "options": {"task_id": "eb-1"}}
BODY = {"task": "proj.tsum", "options": {"task_id": "body-1"}, "errbacks": [ERRBACK]}


#: A chain's next step (``link``) and the run's own ``link_error``.
LINKS: dict[str, Any] = {
    "callbacks": [{"task": "proj.add", "args": [1], "options": {"task_id": "next-1"}}],
    "errbacks": [{"task": "proj.on_error", "options": {"task_id": "own-eb"}}],
}


def _member(i: int, **more: Any) -> EnqueueRequest:
    return EnqueueRequest("proj.add", args=[i, i], key=f"g1-m{i}", **more)


def _chord(k: Harness) -> list[int]:
    """A chord of three: member 1 expires after 10 s and carries a chain's next step
    (``link``) and its own ``link_error``."""
    made = k.kernel.enqueue_many(
        [_member(0), _member(1, expires=10, **LINKS), _member(2)],
        chord={"id": "g1", "body": BODY},
    )
    return [m.occurrence_id for m in made]


def _failed(k: Harness) -> list[dict[str, Any]]:
    return [e.data for e in k.kernel.events() if e.type == "chord_failed"]


def test_a_member_skipped_expired_by_the_upkeep_fails_its_chord_once(k: Harness) -> None:
    ids = _chord(k)
    k.succeed(ids[0], 0)
    k.clock.advance(11)
    assert k.kernel.skip_expired() == 1
    skipped = k.kernel.get_occurrence(ids[1])
    assert (skipped.status, skipped.skip_reason) == (S.SKIPPED, "expired")
    # The body's errback, given the body's task id; the body never made.
    [errback] = k.keyed("eb-1")
    assert errback.payload["args"] == ["body-1"]
    assert _failed(k) == [
        {
            "chord_id": "g1",
            "body_task": "proj.tsum",
            "body_task_id": "body-1",
            "member_task_id": "g1-m1",
            "reason": "expired",
            "errback_task_ids": ["eb-1"],
        }
    ]
    # In the skip's own transaction: its events share the instant and the transaction.
    [skip] = [e for e in k.kernel.events(occurrence_id=ids[1]) if e.type == "occurrence_skipped"]
    [failed] = [e for e in k.kernel.events() if e.type == "chord_failed"]
    assert failed.occurrence_id == ids[1] and failed.at == skip.at
    # As Celery revokes it: neither the member's chain step nor its own link_error.
    assert k.keyed("next-1") == [] and k.keyed("own-eb") == []
    # The last member's success changes nothing: no body, no second failure.
    k.succeed(ids[2], 2)
    assert k.keyed("body-1") == []
    assert len(k.keyed("eb-1")) == 1 and len(_failed(k)) == 1
    # The upkeep again finds nothing to skip, and makes nothing again.
    assert k.kernel.skip_expired() == 0
    assert len(k.keyed("eb-1")) == 1


def test_a_member_a_claim_finds_expired_fails_its_chord(k: Harness) -> None:
    ids = _chord(k)
    k.clock.advance(11)
    assert k.kernel.claim(ids[1], owner="w1", lease=30) is None
    assert k.kernel.get_occurrence(ids[1]).skip_reason == "expired"
    assert [d["reason"] for d in _failed(k)] == ["expired"]
    assert len(k.keyed("eb-1")) == 1
    k.succeed(ids[0], 0)
    k.succeed(ids[2], 2)
    assert k.keyed("body-1") == []


def test_an_expired_run_outside_a_chord_makes_none_of_its_links(k: Harness) -> None:
    k.kernel.enqueue_many([_member(0, expires=10, **LINKS)])
    k.clock.advance(11)
    assert k.kernel.skip_expired() == 1
    assert k.keyed("next-1") == [] and k.keyed("own-eb") == []
    assert _failed(k) == []


def test_one_upkeep_batch_fails_each_chord_of_its_expired_members_once(k: Harness) -> None:
    for chord in ("g2", "g1"):
        errback = {"task": "proj.on_chord_error", "options": {"task_id": f"{chord}-eb"}}
        body = {"task": "proj.tsum", "options": {"task_id": f"{chord}-b"}, "errbacks": [errback]}
        members = [
            EnqueueRequest("proj.add", args=[i], key=f"{chord}-m{i}", expires=10) for i in range(2)
        ]
        k.kernel.enqueue_many(members, chord={"id": chord, "body": body})
    k.clock.advance(11)
    assert k.kernel.skip_expired() == 4
    assert sorted(d["chord_id"] for d in _failed(k)) == ["g1", "g2"]
    assert [len(k.keyed(f"{chord}-eb")) for chord in ("g1", "g2")] == [1, 1]
