"""A chord that grows (issue 40): an open chord (a generator's header) made before its
members, each counted in as it is enqueued, then closed with its size; a running member
adding members (Celery's add_to_chord); an empty header's body made at once. The body is
made exactly once, by whichever transaction sees the chord closed with every member
settled. On SQLite and PostgreSQL."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import pytest

from kernel import EnqueueRequest, InvalidArgument, LeaseLost, NotFound, caller_key

if TYPE_CHECKING:
    from kernel.types import Occurrence
    from tests.kernel.conftest import Harness

ONCE = {"max_attempts": 1, "max_lost_leases": 0}


def _member(i: int, chord: str = "g1", **settings: Any) -> EnqueueRequest:
    return EnqueueRequest("proj.add", args=[i], key=f"{chord}-m{i}", settings=settings)


def _body(**more: Any) -> dict[str, Any]:
    return {"task": "proj.tsum", "options": {"task_id": "body-1"}, **more}


def _keyed(k: Harness, task_id: str) -> list[Occurrence]:
    return [o for o in k.kernel.list_occurrences(limit=500) if o.trigger_key == f"key:{task_id}"]


def _open(k: Harness, first: list[EnqueueRequest] | None = None, **body: Any) -> list[int]:
    made = k.kernel.enqueue_many(
        first or [], chord={"id": "g1", "body": _body(**body), "open": True}
    )
    return [m.occurrence_id for m in made]


def _grow(k: Harness, i: int, **settings: Any) -> int:
    [made] = k.kernel.enqueue_many([_member(i, **settings)], chord={"id": "g1", "grow": "caller"})
    return made.occurrence_id


def _succeed(k: Harness, occurrence_id: int, result: Any) -> None:
    claim = k.kernel.claim(occurrence_id, owner="w1", lease=30)
    assert claim is not None
    k.kernel.succeed(occurrence_id, owner="w1", fence=claim.fence, result=result)


STEPS = ("grow0", "grow1", "settle0", "settle1", "close")
# Every order in which a member is enqueued before it settles: the close anywhere.
ORDERS = [
    order
    for order in itertools.permutations(STEPS)
    if order.index("grow0") < order.index("settle0")
    and order.index("grow1") < order.index("settle1")
    and order.index("grow0") < order.index("grow1") < order.index("close")  # the caller's
]


@pytest.mark.parametrize("order", ORDERS, ids=["-".join(o) for o in ORDERS])
def test_open_members_close_in_every_order_make_the_body_once(
    k: Harness, order: tuple[str, ...]
) -> None:
    _open(k)
    ids: dict[int, int] = {}
    for done, step in enumerate(order, 1):
        if step.startswith("grow"):
            ids[int(step[-1])] = _grow(k, int(step[-1]))
        elif step.startswith("settle"):
            _succeed(k, ids[int(step[-1])], int(step[-1]) * 10)
        else:
            closed_last = done == len(order)
            assert k.kernel.close_chord("g1") is closed_last
        # Never before it is closed with every member settled.
        assert len(_keyed(k, "body-1")) == (1 if done == len(order) else 0), order[:done]
    [body] = _keyed(k, "body-1")
    assert body.payload["args"] == [[0, 10]]
    assert len([e for e in k.kernel.events() if e.type == "chord_completed"]) == 1


def test_an_empty_header_makes_the_body_at_once_with_no_results(k: Harness) -> None:
    made = k.kernel.enqueue_many([], chord={"id": "g1", "body": _body(args=[9])})
    assert made == []
    [body] = _keyed(k, "body-1")
    assert body.payload["args"] == [[], 9]
    # The same chord applied again is the same chord: no second body.
    k.kernel.enqueue_many([], chord={"id": "g1", "body": _body(args=[9])})
    assert len(_keyed(k, "body-1")) == 1


def test_a_closed_chord_takes_no_member_from_its_caller(k: Harness) -> None:
    with pytest.raises(InvalidArgument) as unknown:
        _grow(k, 0)
    assert "no chord 'g1' exists" in unknown.value.message
    first = _open(k, [_member(0)])
    assert k.kernel.close_chord("g1") is False
    assert k.kernel.close_chord("g1") is False  # a retried close: nothing more
    with pytest.raises(InvalidArgument) as closed:
        _grow(k, 1)
    assert closed.value.field == "chord.id"
    assert "is closed" in closed.value.message
    assert [o.id for o in k.kernel.list_occurrences(limit=10)] == first  # nothing written
    _succeed(k, first[0], 5)
    assert _keyed(k, "body-1")[0].payload["args"] == [[5]]
    with pytest.raises(NotFound):
        k.kernel.close_chord("nope")


def test_an_abandoned_open_chord_fails_once_its_body_never(k: Harness) -> None:
    errback = {"task": "proj.on_chord_error", "options": {"task_id": "eb-1"}}
    [m0] = _open(k, [_member(0)], errbacks=[errback])
    assert k.kernel.abandon_chord("g1") is True
    assert k.kernel.abandon_chord("g1") is False
    [made] = _keyed(k, "eb-1")
    assert made.payload["args"] == ["body-1"]
    _succeed(k, m0, 1)
    assert k.kernel.close_chord("g1") is False
    assert _keyed(k, "body-1") == []
    [failed] = [e for e in k.kernel.events() if e.type == "chord_failed"]
    assert failed.data["reason"] == "abandoned"
    with pytest.raises(InvalidArgument, match="failed"):
        _grow(k, 1)


def test_a_member_failing_while_open_fails_the_chord_and_the_close_is_quiet(
    k: Harness,
) -> None:
    [m0] = _open(k, [_member(0, **ONCE)])
    claim = k.kernel.claim(m0, owner="w1", lease=30)
    assert claim is not None
    k.kernel.fail(m0, owner="w1", fence=claim.fence, code="E", message="x")
    assert k.kernel.close_chord("g1") is False
    assert _keyed(k, "body-1") == []
    assert [e.data["reason"] for e in k.kernel.events() if e.type == "chord_failed"] == [
        "dead_letter"
    ]


def test_a_running_member_adds_members_its_body_waits_for_them(k: Harness) -> None:
    made = k.kernel.enqueue_many([_member(0), _member(1)], chord={"id": "g1", "body": _body()})
    m0, m1 = (m.occurrence_id for m in made)
    _succeed(k, m1, 1)
    claim = k.kernel.claim(m0, owner="w1", lease=30)
    assert claim is not None
    added = k.kernel.add_to_chord(
        m0, owner="w1", fence=claim.fence, requests=[_member(5), _member(6)]
    )
    k.kernel.succeed(m0, owner="w1", fence=claim.fence, result=0)
    assert _keyed(k, "body-1") == []  # the added members have not settled
    for extra in added:
        _succeed(k, extra.occurrence_id, extra.occurrence_id)
    [body] = _keyed(k, "body-1")
    assert body.payload["args"] == [[0, 1, *(a.occurrence_id for a in added)]]


def test_an_add_to_chord_is_fenced_and_needs_a_chord(k: Harness) -> None:
    made = k.kernel.enqueue_many([_member(0)], chord={"id": "g1", "body": _body()})
    m0 = made[0].occurrence_id
    claim = k.kernel.claim(m0, owner="w1", lease=30)
    assert claim is not None
    with pytest.raises(LeaseLost):
        k.kernel.add_to_chord(m0, owner="w1", fence=claim.fence + 1, requests=[_member(5)])
    [alone] = k.kernel.enqueue_many([EnqueueRequest("proj.add", args=[1], key="alone")])
    solo = k.kernel.claim(alone.occurrence_id, owner="w1", lease=30)
    assert solo is not None
    with pytest.raises(InvalidArgument, match="no chord's member"):
        k.kernel.add_to_chord(
            alone.occurrence_id, owner="w1", fence=solo.fence, requests=[_member(5)]
        )
    assert len(k.kernel.list_occurrences(limit=10)) == 2  # nothing written
    k.kernel.succeed(m0, owner="w1", fence=claim.fence, result=0)
    assert _keyed(k, "body-1")[0].payload["args"] == [[0]]


def test_a_member_of_a_failed_chord_adds_nothing(k: Harness) -> None:
    made = k.kernel.enqueue_many(
        [_member(0, **ONCE), _member(1, **ONCE)], chord={"id": "g1", "body": _body()}
    )
    m0, m1 = (m.occurrence_id for m in made)
    claim = k.kernel.claim(m1, owner="w1", lease=30)
    assert claim is not None
    k.kernel.fail(m1, owner="w1", fence=claim.fence, code="E", message="x")
    held = k.kernel.claim(m0, owner="w1", lease=30)
    assert held is not None
    with pytest.raises(InvalidArgument, match="failed: it takes no more members"):
        k.kernel.add_to_chord(m0, owner="w1", fence=held.fence, requests=[_member(5, **ONCE)])


def test_a_replacement_by_an_empty_group_makes_its_body_at_once(k: Harness) -> None:
    """Celery's ``self.replace(group())``: a chord of no member over accumulate, whose
    body (taking the replaced run's task id) is made in the replace's transaction."""
    made = k.kernel.enqueue(task="proj.add_to_all", args=[[], 9], key="t1")
    claim = k.kernel.claim(made.occurrence_id, owner="w1", lease=30)
    assert claim is not None
    body = {"task": "celery.accumulate", "kwargs": {"index": 0}, "options": {"task_id": "t1"}}
    replacement = {**body, "chord": {"id": "inner", "header": []}}
    assert (
        k.kernel.replace(
            made.occurrence_id,
            owner="w1",
            fence=claim.fence,
            replacement=replacement,
            task_id="t1",
        )
        == []
    )
    [accumulate] = [o for o in k.kernel.list_occurrences(limit=10) if o.id != made.occurrence_id]
    assert accumulate.payload["args"] == [[]]
    assert caller_key(accumulate.trigger_key) == "t1"


def test_why_tells_of_a_chord_its_caller_has_not_closed(k: Harness) -> None:
    """A caller that died mid-generator leaves its chord open: ``kernel why`` on a member
    says the chord is still growing, since when, and that its body waits for the close."""
    [m0] = _open(k, [_member(0)])
    _succeed(k, m0, 0)
    canvas = k.kernel.canvas(m0)
    assert canvas is not None
    assert canvas["chord"]["state"] == "growing"
    assert canvas["waits_for"] == (
        "chord g1: its caller is still adding members (open since "
        f"{canvas['chord']['opened_at']}); its body proj.tsum (body-1) is made once it "
        "closes and every member succeeded"
    )
    assert k.kernel.close_chord("g1") is True
    done = k.kernel.canvas(m0)
    assert done is not None and done["chord"]["state"] == "complete"
