"""The runs a write makes (a settle's chain step, chord body, errback) handed to the
kernel's ``on_runs_made`` once it commits, marked hinted in it, so their maker publishes
them at once instead of Beat's pump at its next tick; on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from kernel import DispatchHint, EnqueueRequest

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness

ONCE = {"max_attempts": 1, "max_lost_leases": 0}


@pytest.fixture
def published(k: Harness) -> Iterator[list[list[DispatchHint]]]:
    """What ``on_runs_made`` was handed, one list per committed write."""
    calls: list[list[DispatchHint]] = []
    k.kernel.on_runs_made = calls.append
    yield calls
    k.kernel.on_runs_made = None


def sig(task: str, task_id: str, **options: Any) -> dict[str, Any]:
    return {"task": task, "args": [], "options": {"task_id": task_id, **options}}


def _pumped(k: Harness) -> list[int]:
    return [h.occurrence_id for h in k.kernel.dispatch_batch(rehint_after=3600)]


def test_a_success_hands_over_its_callbacks_marked_hinted(
    k: Harness, published: list[list[DispatchHint]]
) -> None:
    made = k.kernel.enqueue(
        task="proj.a",
        key="a-1",
        callbacks=[sig("proj.b", "b-1"), sig("proj.later", "later-1", countdown=600)],
        errbacks=[sig("proj.oops", "oops-1")],
    )
    assert _pumped(k) == [made.occurrence_id]  # the caller's run, for this check's pump
    assert published == []  # an enqueue's hint is its caller's, not this hook's
    k.succeed(made.occurrence_id, 1)
    [b] = k.keyed("b-1")
    [[hint]] = published  # not the held-back callback: it is the pump's when due
    assert (hint.occurrence_id, hint.job_id, hint.kind) == (b.id, "task:proj.b", "task")
    assert hint.payload is not None and hint.payload["task"] == "proj.b"
    assert _pumped(k) == []  # hinted in the settle: the pump does not hint it again
    # Its maker killed before it published: the pump's rehint interval later, it does.
    k.clock.advance(3601)
    assert b.id in _pumped(k)
    k.succeed(b.id, 2)  # a run that makes nothing hands over nothing
    assert len(published) == 1


def test_errbacks_are_left_to_the_pump(k: Harness, published: list[list[DispatchHint]]) -> None:
    """A failure reaches the result backend after its settle (a chord's ChordError, an
    owed end), and Celery calls errbacks once it is stored: the pump hints them."""
    made = k.kernel.enqueue(
        task="proj.a",
        key="a-1",
        settings=ONCE,
        callbacks=[sig("proj.b", "b-1")],
        errbacks=[sig("proj.oops", "oops-1")],
    )
    chord = k.kernel.enqueue_many(
        [EnqueueRequest("proj.add", args=[i], key=f"m{i}", settings=ONCE) for i in range(2)],
        chord={"id": "g1", "body": {**sig("proj.tsum", "body"), "errbacks": [sig("e", "e-1")]}},
    )
    assert sorted(_pumped(k)) == sorted([made.occurrence_id, *(m.occurrence_id for m in chord)])
    assert k.fail(made.occurrence_id) == "dead_letter"
    assert k.fail(chord[0].occurrence_id) == "dead_letter"
    [oops], [chord_errback] = k.keyed("oops-1"), k.keyed("e-1")
    assert published == []
    assert sorted(_pumped(k)) == sorted([oops.id, chord_errback.id])


def test_the_last_member_of_a_chord_hands_over_the_body(
    k: Harness, published: list[list[DispatchHint]]
) -> None:
    members = [EnqueueRequest("proj.add", args=[i], key=f"m{i}") for i in range(3)]
    made = k.kernel.enqueue_many(members, chord={"id": "g1", "body": sig("proj.tsum", "body")})
    for member in made[:2]:
        k.succeed(member.occurrence_id, 1)
    assert published == []
    k.succeed(made[2].occurrence_id, 1)
    [body] = k.keyed("body")
    assert [[h.occurrence_id for h in hints] for hints in published] == [[body.id]]


def test_without_the_hook_the_pump_hints_what_a_settle_made(k: Harness) -> None:
    made = k.kernel.enqueue(task="proj.a", key="a-1", callbacks=[sig("proj.b", "b-1")])
    assert _pumped(k) == [made.occurrence_id]
    k.succeed(made.occurrence_id, 1)
    [b] = k.keyed("b-1")
    assert _pumped(k) == [b.id]
