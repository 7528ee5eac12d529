"""A chord failed by a member that has errbacks of its own (issue 40; Celery's
``task_allow_error_cb_on_chord_header``, a header member given the chord's errback as an
immutable clone): the member's errbacks and the chord body's are each made, once. On
SQLite and PostgreSQL."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kernel import EnqueueRequest

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
