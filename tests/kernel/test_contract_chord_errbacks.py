"""A chord failed by a member that has errbacks of its own (issue 40; Celery's
``task_allow_error_cb_on_chord_header``, a header member given the chord's errback as an
immutable clone): the member's errbacks and the chord body's are each made, once. On
SQLite and PostgreSQL."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from kernel import EnqueueRequest, InvalidArgument

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness

ONCE = {"max_attempts": 1, "max_lost_leases": 0}


def _errback(tag: str) -> dict[str, Any]:
    """An errback as Celery links one: no task id of its own, immutable."""
    return {"task": "proj.echo", "args": [tag], "immutable": True}


def test_a_failing_members_errbacks_and_the_chords_are_each_made_once(k: Harness) -> None:
    members = [
        EnqueueRequest("proj.fail", args=[i], key=f"g1-m{i}", settings=ONCE,
                       errbacks=[_errback("member")])
        for i in range(2)
    ]  # fmt: skip
    body = {"task": "proj.tsum", "options": {"task_id": "body-1"}, "errbacks": [_errback("body")]}
    made = k.kernel.enqueue_many(members, chord={"id": "g1", "body": body})
    for m in made:
        claim = k.kernel.claim(m.occurrence_id, owner="w1", lease=30)
        assert claim is not None
        k.kernel.fail(m.occurrence_id, owner="w1", fence=claim.fence, code="E", message="x")
    echoed = sorted(
        o.payload["args"][0]
        for o in k.kernel.list_occurrences(limit=100)
        if o.payload["task"] == "proj.echo"
    )
    # Each member's own errback (immutable: no argument given), and the chord's once.
    assert echoed == ["body", "member", "member"]


def _echoes(k: Harness) -> list[Any]:
    return sorted(
        (o.payload["args"], o.payload["request"].get("parent_id"))
        for o in k.kernel.list_occurrences(limit=200)
        if o.payload["task"] == "proj.echo"
    )


def _end_for_good(k: Harness, occurrence_id: int, how: str) -> None:
    """One header member's end for good, each way a run fails a chord."""
    if how == "cancel":
        k.kernel.cancel(occurrence_id, request_id=f"c{occurrence_id}", operator="op")
        return
    claim = k.kernel.claim(occurrence_id, owner="w1", lease=30)
    assert claim is not None
    if how == "exception":
        k.kernel.fail(occurrence_id, owner="w1", fence=claim.fence, code="E", message="x")
    elif how == "retries_spent":
        k.kernel.fail(occurrence_id, owner="w1", fence=claim.fence, code="E", message="x",
                      retry_in=0)  # fmt: skip
        again = k.kernel.claim(occurrence_id, owner="w1", lease=30)
        assert again is not None
        k.kernel.fail(occurrence_id, owner="w1", fence=again.fence, code="E", message="x")
    elif how == "lease_lost":  # the worker SIGKILLed on the last attempt: its lease expires
        k.clock.advance(60)
        assert k.kernel.expire_leases()["dead_letter"] == 1
    else:  # an at-most-once run lost, its operator abandons it
        k.clock.advance(60)
        assert k.kernel.expire_leases()["needs_adjudication"] == 1
        k.kernel.adjudicate(occurrence_id, decision="abandon", request_id=f"r{occurrence_id}",
                            operator="op")  # fmt: skip


@pytest.mark.parametrize("how", ["exception", "retries_spent", "lease_lost", "abandon", "cancel"])
def test_a_group_body_gives_each_members_errbacks_once(k: Harness, how: str) -> None:
    """Celery's chord(header, group(a, b)) failed by its header: each member of the body
    gives its own errbacks (its first argument, an errback's task id and parent: that
    member's id), each once however many header members fail; no body member is made."""
    settings = {"max_attempts": 2 if how == "retries_spent" else 1, "max_lost_leases": 0,
                **({"delivery": "at-most-once"} if how == "abandon" else {})}  # fmt: skip
    members = [
        EnqueueRequest("proj.fail", args=[i], key=f"g1-m{i}", settings=settings) for i in range(2)
    ]
    mutable = {"task": "proj.echo", "args": ["mine"]}
    body = [
        {"task": "proj.tsum", "options": {"task_id": "b-0"},
         "errbacks": [_errback("own"), _errback("chord"), mutable]},
        {"task": "proj.tsum", "options": {"task_id": "b-1"}, "errbacks": [_errback("chord")]},
    ]  # fmt: skip
    made = k.kernel.enqueue_many(members, chord={"id": "g1", "body": body, "result_id": "g-b"})
    _end_for_good(k, made[0].occurrence_id, how)
    _end_for_good(k, made[1].occurrence_id, how)
    assert _echoes(k) == [
        (["b-0", "mine"], "b-0"), (["chord"], "b-0"), (["chord"], "b-1"), (["own"], "b-0"),
    ]  # fmt: skip
    assert not [o for o in k.kernel.list_occurrences(limit=200) if o.payload["task"] == "proj.tsum"]
    [failed] = [e.data for e in k.kernel.events() if e.type == "chord_failed"]
    assert failed["body_task_ids"] == ["b-0", "b-1"]
    assert len(failed["errback_task_ids"]) == 4


def test_a_chord_in_a_group_body_gives_its_bodys_errbacks_once(k: Harness) -> None:
    """chord(header, group(chord([c], d), e)) failed by its header: the inner chord is never
    made; its body's errbacks are given under the id its result is (its body's), once."""
    inner = {
        "task": "proj.tsum", "options": {"task_id": "d-1"}, "errbacks": [_errback("chord")],
        "chord": {"id": "g2", "header": [{"task": "proj.add", "args": [2, 2],
                                          "options": {"task_id": "g2-m0"}}]},
    }  # fmt: skip
    body = [inner, {"task": "proj.tsum", "options": {"task_id": "e-1"},
                    "errbacks": [_errback("chord")]}]  # fmt: skip
    members = [
        EnqueueRequest("proj.fail", args=[i], key=f"g1-m{i}", settings=ONCE) for i in range(2)
    ]
    made = k.kernel.enqueue_many(members, chord={"id": "g1", "body": body})
    for m in made:
        _end_for_good(k, m.occurrence_id, "exception")
    assert _echoes(k) == [(["chord"], "d-1"), (["chord"], "e-1")]
    keys = {o.trigger_key for o in k.kernel.list_occurrences(limit=200)}
    assert not keys & {"key:g2-m0", "key:d-1", "key:e-1"}
    [failed] = [e.data for e in k.kernel.events() if e.type == "chord_failed"]
    assert failed["body_task_ids"] == ["d-1", "e-1"]


def test_a_group_body_of_one_member_fails_under_that_members_id(k: Harness) -> None:
    """chord(header, group(a)): still a group body, failed member by member, under the
    member's id, not the group's (``result_id``)."""
    errback = {"task": "proj.echo"}
    body = [{"task": "proj.tsum", "options": {"task_id": "b-0"}, "errbacks": [errback]}]
    made = k.kernel.enqueue_many(
        [EnqueueRequest("proj.fail", key="g1-m0", settings=ONCE)],
        chord={"id": "g1", "body": body, "result_id": "g-b"},
    )
    _end_for_good(k, made[0].occurrence_id, "exception")
    assert _echoes(k) == [(["b-0"], "b-0")]
    [failed] = [e.data for e in k.kernel.events() if e.type == "chord_failed"]
    assert (failed["body_task_id"], failed["body_task_ids"]) == ("g-b", ["b-0"])


def _succeed(k: Harness, occurrence_id: int, result: Any) -> None:
    claim = k.kernel.claim(occurrence_id, owner="w1", lease=30)
    assert claim is not None
    k.kernel.succeed(occurrence_id, owner="w1", fence=claim.fence, result=result)


def _keyed(k: Harness, task_id: str) -> Any:
    [found] = [o for o in k.kernel.list_occurrences(limit=200) if o.trigger_key == f"key:{task_id}"]
    return found


def _chord_with_group_body() -> dict[str, Any]:
    """chord([add(2, 2)], group(b, c)) as a member of an outer chord's group body: the
    signature is the body's first member, ``group`` the others."""
    first = {"task": "proj.fail", "options": {"task_id": "b-1"}, "errbacks": [_errback("b")],
             "settings": ONCE}  # fmt: skip
    second = {"task": "proj.tsum", "options": {"task_id": "c-1"}, "errbacks": [_errback("c")]}
    header = [{"task": "proj.add", "args": [2, 2], "options": {"task_id": "g2-m0"},
               "settings": ONCE}]  # fmt: skip
    return {**first, "chord": {"id": "g2", "header": header, "group": [second]}}


def test_a_chord_in_a_group_body_may_have_a_group_body(k: Harness) -> None:
    """Made when the outer chord completes; its own group body made by its last member,
    each member given its results first; a member of that group failing gives its own
    errbacks only (the chords completed)."""
    made = k.kernel.enqueue_many(
        [EnqueueRequest("proj.add", args=[1, 1], key="g1-m0", settings=ONCE)],
        chord={"id": "g1", "body": [_chord_with_group_body()]},
    )
    _succeed(k, made[0].occurrence_id, 2)
    inner = _keyed(k, "g2-m0")
    assert inner.payload["args"] == [[2], 2, 2]
    _succeed(k, inner.id, 4)
    first, second = _keyed(k, "b-1"), _keyed(k, "c-1")
    assert (first.payload["args"], second.payload["args"]) == ([[4]], [[4]])
    _end_for_good(k, first.id, "exception")
    _succeed(k, second.id, 4)
    assert _echoes(k) == [(["b"], "b-1")]


def test_a_chord_in_a_group_body_with_a_group_body_fails_each_member_once(k: Harness) -> None:
    """Its header failing: each member of its group body gives its errbacks, once."""
    made = k.kernel.enqueue_many(
        [EnqueueRequest("proj.add", args=[1, 1], key="g1-m0", settings=ONCE)],
        chord={"id": "g1", "body": [_chord_with_group_body()]},
    )
    _succeed(k, made[0].occurrence_id, 2)
    _end_for_good(k, _keyed(k, "g2-m0").id, "exception")
    assert _echoes(k) == [(["b"], "b-1"), (["c"], "c-1")]
    failed = [e.data for e in k.kernel.events() if e.type == "chord_failed"]
    assert [(f["chord_id"], f["body_task_ids"]) for f in failed] == [("g2", ["b-1", "c-1"])]


def test_a_chord_steps_group_must_be_a_list_of_signatures(k: Harness) -> None:
    body = _chord_with_group_body()
    body["chord"]["group"] = [{"task": ""}]
    with pytest.raises(InvalidArgument) as refused:
        k.kernel.enqueue_many(
            [EnqueueRequest("proj.add", key="g1-m0")], chord={"id": "g1", "body": [body]}
        )
    assert refused.value.field == "chord.body[0].chord.group[0].task"
