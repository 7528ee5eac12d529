"""Groups and chords (issue 40): a chord's members are made in one transaction under its
id; the settle of the last member to succeed makes the body once, the members' results in
group order first; a member that fails for good fails the chord: the body's errbacks are
made once, the body never. On SQLite and PostgreSQL."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from kernel import EnqueueRequest, InvalidArgument
from kernel.states import OccurrenceStatus as S

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness

ONCE = {"max_attempts": 1, "max_lost_leases": 0}


def _members(n: int, chord: str = "g1", **settings: Any) -> list[EnqueueRequest]:
    return [
        EnqueueRequest("proj.add", args=[i, i], key=f"{chord}-m{i}", settings=settings)
        for i in range(n)
    ]


def _body(**more: Any) -> dict[str, Any]:
    return {"task": "proj.tsum", "args": ["extra"], "options": {"task_id": "body-1"}, **more}


def test_a_group_is_made_in_one_transaction_or_not_at_all(k: Harness) -> None:
    bad = [*_members(3), EnqueueRequest("proj.add", args=[{1}])]
    with pytest.raises(InvalidArgument) as refused:
        k.kernel.enqueue_many(bad, chord={"id": "g1", "body": _body()})
    assert refused.value.field == "requests[3].args[0]"
    assert k.kernel.list_occurrences(limit=10) == []
    made = k.kernel.enqueue_many(_members(3), chord={"id": "g1", "body": _body()})
    created = [e for e in k.kernel.events() if e.type == "occurrence_created"]
    # One transaction: every member's creation in it (the event log's xact on PostgreSQL;
    # on both, the one statement's rows share one instant).
    assert [e.occurrence_id for e in created] == [m.occurrence_id for m in made]
    assert len({e.at for e in created}) == 1


def test_the_last_member_makes_the_body_once_with_the_results_in_group_order(
    k: Harness,
) -> None:
    made = k.kernel.enqueue_many(_members(4), chord={"id": "g1", "body": _body()})
    # Settled out of order: the results are still in the group's order.
    for index in (2, 0, 3):
        k.succeed(made[index].occurrence_id, index * 10)
        assert k.keyed("body-1") == []
    k.succeed(made[1].occurrence_id, {"one": 1})
    [body] = k.keyed("body-1")
    assert body.payload == {
        "task": "proj.tsum",
        "args": [[0, {"one": 1}, 20, 30], "extra"],
        "kwargs": {},
        # The member whose settle completed the chord, as Celery's last member applies it.
        "request": {"parent_id": "g1-m1"},
    }
    assert body.status == S.QUEUED
    completed = [e for e in k.kernel.events() if e.type == "chord_completed"]
    assert [(e.occurrence_id, e.data["chord_id"]) for e in completed] == [
        (made[1].occurrence_id, "g1")
    ]
    # The same chord enqueued again is the same chord: nothing new.
    again = k.kernel.enqueue_many(_members(4), chord={"id": "g1", "body": _body()})
    assert all(a.deduplicated for a in again)
    assert len(k.kernel.list_occurrences(limit=100)) == 5


def test_a_member_dead_lettered_fails_the_chord_errbacks_once_body_never(k: Harness) -> None:
    body = _body(errbacks=[{"task": "proj.on_chord_error", "options": {"task_id": "eb-1"}}])
    made = k.kernel.enqueue_many(_members(3, **ONCE), chord={"id": "g1", "body": body})
    k.succeed(made[0].occurrence_id, 0)
    assert k.fail(made[1].occurrence_id) == "dead_letter"
    # Celery's errback(task_id) of the body: the body's task id first.
    [errback] = k.keyed("eb-1")
    assert errback.payload["args"] == ["body-1"]
    # A second member dying and the last succeeding change nothing.
    assert k.fail(made[2].occurrence_id) == "dead_letter"
    assert k.keyed("body-1") == []
    assert len(k.keyed("eb-1")) == 1
    failed = [e for e in k.kernel.events() if e.type == "chord_failed"]
    # What the worker writes the body's ChordError from (celery_app/task_results.py).
    assert [e.data for e in failed] == [
        {
            "chord_id": "g1",
            "body_task": "proj.tsum",
            "body_task_id": "body-1",
            "member_task_id": "g1-m1",
            "reason": "dead_letter",
            "errback_task_ids": ["eb-1"],
        }
    ]


def test_a_member_killed_on_its_last_attempt_fails_the_chord(k: Harness) -> None:
    body = _body(errbacks=[{"task": "proj.on_chord_error", "options": {"task_id": "eb-1"}}])
    made = k.kernel.enqueue_many(_members(2, **ONCE), chord={"id": "g1", "body": body})
    k.succeed(made[0].occurrence_id, 0)
    assert k.kernel.claim(made[1].occurrence_id, owner="w1", lease=30) is not None
    k.clock.advance(60)
    assert k.kernel.expire_leases()["dead_letter"] == 1
    assert len(k.keyed("eb-1")) == 1
    assert k.keyed("body-1") == []


def test_a_new_chord_over_an_existing_run_is_refused(k: Harness) -> None:
    k.kernel.enqueue(task="proj.add", args=[0, 0], key="g1-m0")
    with pytest.raises(InvalidArgument) as refused:
        k.kernel.enqueue_many(_members(2), chord={"id": "g1", "body": _body()})
    assert refused.value.field == "requests[0].key"
    assert len(k.kernel.list_occurrences(limit=10)) == 1


def test_a_member_cancelled_fails_the_chord_and_the_others_ending_changes_nothing(
    k: Harness,
) -> None:
    body = _body(errbacks=[{"task": "proj.on_chord_error", "options": {"task_id": "eb-1"}}])
    made = k.kernel.enqueue_many(_members(3), chord={"id": "g1", "body": body})
    running = k.kernel.claim(made[2].occurrence_id, owner="w1", lease=30)
    assert running is not None
    k.kernel.cancel(made[0].occurrence_id, request_id="c1", operator="op")
    [errback] = k.keyed("eb-1")
    assert errback.payload["args"] == ["body-1"]
    failed = [e for e in k.kernel.events() if e.type == "chord_failed"]
    assert [e.data["reason"] for e in failed] == ["cancelled"]
    # The others end as they may: the chord failed once, its body never made.
    k.kernel.cancel(made[2].occurrence_id, request_id="c2", operator="op")
    # A run asked to stop that finishes anyway succeeds; its chord has failed already.
    k.kernel.succeed(made[2].occurrence_id, owner="w1", fence=running.fence, result=2)
    k.succeed(made[1].occurrence_id, 1)
    assert k.keyed("body-1") == []
    assert len(k.keyed("eb-1")) == 1


def test_an_existing_chord_s_id_over_other_runs_is_refused(k: Harness) -> None:
    k.kernel.enqueue_many(_members(2), chord={"id": "g1", "body": _body()})
    others = _members(2, chord="g2")
    with pytest.raises(InvalidArgument) as refused:
        k.kernel.enqueue_many(others, chord={"id": "g1", "body": _body()})
    assert refused.value.field == "chord.id"
    assert len(k.kernel.list_occurrences(limit=10)) == 2


def _header(chord: str, *args: Any) -> list[dict[str, Any]]:
    return [
        {"task": "proj.add", "args": [a], "options": {"task_id": f"{chord}-m{i}"}}
        for i, a in enumerate(args)
    ]


def test_a_chords_body_may_be_a_chord_made_when_the_first_completes(k: Harness) -> None:
    """Celery's ``group | group | task``: the first chord's body is a chord. The settle
    that completes the first makes the second's members (the first's results first) and
    its row; the second's last member makes the body; a member of the second that fails
    fails it with the body's task id (the id the caller holds)."""
    body = {**_body(), "chord": {"id": "g2", "header": _header("g2", 1, 2)}}
    made = k.kernel.enqueue_many(_members(2), chord={"id": "g1", "body": body})
    k.succeed(made[0].occurrence_id, 0)
    k.succeed(made[1].occurrence_id, 2)
    inner = [k.keyed(f"g2-m{i}") for i in range(2)]
    assert [o.payload["args"] for [o] in inner] == [[[0, 2], 1], [[0, 2], 2]]
    assert k.keyed("body-1") == []
    k.succeed(inner[1][0].id, 20)
    k.succeed(inner[0][0].id, 10)
    [made_body] = k.keyed("body-1")
    assert made_body.payload["args"] == [[10, 20], "extra"]
    completed = [e.data["chord_id"] for e in k.kernel.events() if e.type == "chord_completed"]
    assert completed == ["g1", "g2"]


def test_a_chain_step_that_is_a_chord_of_chords_fails_with_its_body_s_id(k: Harness) -> None:
    """As a chain's step: ``{..., "chord": {"id", "header", "then": {"id", "header"}}}``
    makes the first chord; its body is the signature with the ``then`` chord."""
    step = {**_body(), "chord": {"id": "c1", "header": _header("c1", 1),
                                 "then": {"id": "c2", "header": _header("c2", 5, 6)}}}  # fmt: skip
    first = k.kernel.enqueue(task="proj.a", key="a-1", callbacks=[step], settings=ONCE)
    k.succeed(first.occurrence_id, 1)
    [c1] = k.keyed("c1-m0")
    assert c1.payload["args"] == [1, 1]
    k.succeed(c1.id, 2)
    [m0], [m1] = k.keyed("c2-m0"), k.keyed("c2-m1")
    assert m0.payload["args"] == [[2], 5]
    k.succeed(m0.id, 7)
    claim = k.kernel.claim(m1.id, owner="w1", lease=30)
    assert claim is not None
    k.kernel.fail(m1.id, owner="w1", fence=claim.fence, code="E", message="x", retryable=False)
    assert k.keyed("body-1") == []
    [failed] = [e.data for e in k.kernel.events() if e.type == "chord_failed"]
    assert (failed["chord_id"], failed["body_task_id"]) == ("c2", "body-1")


def test_a_chain_body_fails_under_the_id_its_caller_holds(k: Harness) -> None:
    """``chord(members, chain(tsum, add.s(1)))``: the body is the chain's first step, the
    rest its callbacks; a failure is written and its errbacks given under the chain's id
    (its last step's, ``result_id``), which the caller's AsyncResult reads."""
    rest = {"task": "proj.add", "args": [1], "options": {"task_id": "last-1"}}
    eb = {"task": "proj.on_chord_error", "options": {"task_id": "eb-1"}}
    body = _body(callbacks=[rest], errbacks=[eb])
    made = k.kernel.enqueue_many(
        _members(2, **ONCE), chord={"id": "g1", "body": body, "result_id": "last-1"}
    )
    assert k.kernel.canvas(made[0].occurrence_id)["chord"]["body_task_id"] == "last-1"
    assert k.fail(made[0].occurrence_id) == "dead_letter"
    [errback] = k.keyed("eb-1")
    assert errback.payload["args"] == ["last-1"]
    failed = [e.data["body_task_id"] for e in k.kernel.events() if e.type == "chord_failed"]
    assert failed == ["last-1"]
    # The same chord succeeding: the body once, then the rest after it.
    made = k.kernel.enqueue_many(
        _members(2, chord="g2"), chord={"id": "g2", "body": _body(callbacks=[rest])}
    )
    for index in (0, 1):
        k.succeed(made[index].occurrence_id, index)
    [first] = k.keyed("body-1")
    k.succeed(first.id, 7)
    [after] = k.keyed("last-1")
    assert after.payload["args"] == [7, 1]


def test_a_chord_s_result_id_must_be_a_task_id(k: Harness) -> None:
    with pytest.raises(InvalidArgument) as refused:
        k.kernel.enqueue_many(_members(2), chord={"id": "g1", "body": _body(), "result_id": 7})
    assert refused.value.field == "chord.result_id"
    assert k.kernel.list_occurrences(limit=10) == []


def test_retention_keeps_a_chord_s_members_until_its_body_is_made(k: Harness) -> None:
    """A member's result is read when the body is made: a member that succeeded long
    before the last one is kept by retention meanwhile (also an open, growing chord's),
    and pruned as any run once the body is made."""
    day = 86400.0
    made = k.kernel.enqueue_many(_members(3), chord={"id": "g1", "body": _body()})
    k.kernel.enqueue_many([], chord={"id": "g2", "body": _body(), "open": True})
    [grown] = k.kernel.enqueue_many(_members(1, chord="g2"), chord={"id": "g2", "grow": "caller"})
    k.succeed(grown.occurrence_id, "grown")
    for index in (0, 1):
        k.succeed(made[index].occurrence_id, index)
    k.clock.advance(2 * day)
    assert k.kernel.apply_retention({"succeeded": day})["occurrences"] == 0
    k.succeed(made[2].occurrence_id, 2)
    [body] = k.keyed("body-1")
    assert body.payload["args"] == [[0, 1, 2], "extra"]
    k.clock.advance(2 * day)
    # Its body made, the first chord's members go as any run; the open chord's stays.
    assert k.kernel.apply_retention({"succeeded": day})["occurrences"] == 3
    assert k.kernel.get_occurrence(grown.occurrence_id).result == "grown"


def test_a_task_s_history_limit_keeps_a_chord_s_members_until_its_body_is_made(
    k: Harness,
) -> None:
    """``history: {succeeded: 1}`` among the members' task's settings: the members past it
    are kept while the body waits for them, and go once it is made."""
    made = k.kernel.enqueue_many(
        _members(3, history={"succeeded": 1}), chord={"id": "g1", "body": _body()}
    )
    for index in (0, 1):
        k.succeed(made[index].occurrence_id, index)
    assert k.kernel.apply_retention({"succeeded": None})["occurrences"] == 0
    k.succeed(made[2].occurrence_id, 2)
    [body] = k.keyed("body-1")
    assert body.payload["args"] == [[0, 1, 2], "extra"]
    assert k.kernel.apply_retention({"succeeded": None})["occurrences"] == 2
