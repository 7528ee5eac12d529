"""A chord's row goes with its history (issue 42 item 4, issue 40): retention deletes it in
the pass that deletes the last of its members, once the chord is done (its body made, or
failed); a growing chord's row, or a done one's with a member left, stays. On SQLite and
PostgreSQL; the statement's plan seeks members by id, never scans ``occurrences``."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
import sqlalchemy as sa

from kernel import EnqueueRequest, NotFound
from tests.kernel.test_history_plans import _captured, _plan

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness

DAY = 86400.0
ONCE = {"max_attempts": 1, "max_lost_leases": 0}


def _members(n: int, chord: str = "g1", **settings: Any) -> list[EnqueueRequest]:
    return [
        EnqueueRequest("proj.add", args=[i, i], key=f"{chord}-m{i}", settings=settings)
        for i in range(n)
    ]


def _body(task_id: str = "body-1", **more: Any) -> dict[str, Any]:
    return {"task": "proj.tsum", "options": {"task_id": task_id}, **more}


def _chords(k: Harness) -> set[str]:
    with k.kernel.engine.connect() as conn:
        return set(conn.execute(sa.text("SELECT id FROM chords")).scalars())


def _prune(k: Harness) -> int:
    """A retention pass two days on: successes and cancels older than a day go."""
    k.clock.advance(2 * DAY)
    return int(k.kernel.apply_retention({"succeeded": DAY, "cancelled": DAY})["occurrences"])


def test_a_done_chord_s_row_goes_with_its_last_member(k: Harness) -> None:
    made = k.kernel.enqueue_many(_members(3), chord={"id": "g1", "body": _body()})
    for index, member in enumerate(made):
        k.succeed(member.occurrence_id, index)
    [body] = k.keyed("body-1")
    assert k.kernel.canvas(body.id)["role"] == "chord body"  # type: ignore[index]
    assert _prune(k) == 3
    assert _chords(k) == set()
    [pruned] = [e for e in k.kernel.events(limit=1000) if e.type == "history_pruned"]
    assert (pruned.data["occurrences"], pruned.data["chords"]) == (3, 1)
    # Its body (waiting, not pruned) is told without the chord: no member is left to name it.
    assert (k.kernel.canvas(body.id) or {}).get("chord") is None
    # Nothing of it is left to grow or close.
    with pytest.raises(NotFound):
        k.kernel.close_chord("g1")


def test_a_done_chord_with_a_member_left_keeps_its_row(k: Harness) -> None:
    made = k.kernel.enqueue_many(_members(3), chord={"id": "g1", "body": _body()})
    k.succeed(made[0].occurrence_id, 0)
    k.succeed(made[1].occurrence_id, 1)
    k.clock.advance(2 * DAY)
    k.succeed(made[2].occurrence_id, 2)  # the body made now
    k.clock.advance(DAY / 2)
    assert k.kernel.apply_retention({"succeeded": DAY})["occurrences"] == 2
    assert _chords(k) == {"g1"}
    story = k.kernel.canvas(made[2].occurrence_id)
    assert story is not None and story["chord"]["state"] == "complete"
    assert _prune(k) == 1
    assert _chords(k) == set()


def test_a_job_s_history_limit_deletes_the_row_with_the_last_member(k: Harness) -> None:
    """``history: {succeeded: 1}``: the members past it go once the body is made, the
    newest with the next run of the task, and the row with it."""
    limited = {"history": {"succeeded": 1}}
    made = k.kernel.enqueue_many(_members(2, **limited), chord={"id": "g1", "body": _body()})
    for index, member in enumerate(made):
        k.succeed(member.occurrence_id, index)
    assert k.kernel.apply_retention({"succeeded": None})["occurrences"] == 1
    assert _chords(k) == {"g1"}
    later = k.kernel.enqueue(task="proj.add", args=[9, 9], key="later", settings=limited)
    k.succeed(later.occurrence_id, 18)
    assert k.kernel.apply_retention({"succeeded": None})["occurrences"] == 1
    assert _chords(k) == set()
    pruned = [e.data for e in k.kernel.events(limit=1000) if e.type == "history_pruned"]
    assert [(p["occurrences"], p["chords"]) for p in pruned] == [(1, 0), (1, 1)]


def test_a_failed_chord_keeps_its_row_while_a_member_lives_late_settles_count_nothing(
    k: Harness,
) -> None:
    """A member dead-lettered fails the chord; another, running then, settles late: it
    counts nothing (before this change too) and the row stays while it exists. The dead
    letter is never pruned, so the row stays with it; requeued, it succeeds late, makes no
    body, and once it is pruned the row goes."""
    errback = {"task": "proj.on_chord_error", "options": {"task_id": "eb-1"}}
    made = k.kernel.enqueue_many(
        _members(3, **ONCE), chord={"id": "g1", "body": _body(errbacks=[errback])}
    )
    late = k.kernel.claim(made[2].occurrence_id, owner="w1", lease=30)
    assert late is not None
    k.succeed(made[0].occurrence_id, 0)
    assert k.fail(made[1].occurrence_id) == "dead_letter"
    k.kernel.succeed(made[2].occurrence_id, owner="w1", fence=late.fence, result=2)
    assert _prune(k) == 2
    assert _chords(k) == {"g1"}
    story = k.kernel.canvas(made[1].occurrence_id)
    assert story is not None and story["waits_for"].startswith("nothing: chord g1 failed")
    k.kernel.requeue(made[1].occurrence_id, request_id="r1", operator="op")
    k.succeed(made[1].occurrence_id, 1)
    assert _chords(k) == {"g1"}
    assert _prune(k) == 1
    assert _chords(k) == set()
    assert k.keyed("body-1") == []
    assert len(k.keyed("eb-1")) == 1


def test_a_cancelled_member_s_chord_goes_once_every_member_is_pruned(k: Harness) -> None:
    made = k.kernel.enqueue_many(_members(2), chord={"id": "g1", "body": _body()})
    k.kernel.cancel(made[0].occurrence_id, request_id="c1", operator="op")
    k.clock.advance(2 * DAY)
    k.succeed(made[1].occurrence_id, 1)  # late: its chord failed two days ago
    k.clock.advance(DAY / 2)
    assert k.kernel.apply_retention({"cancelled": DAY})["occurrences"] == 1
    assert _chords(k) == {"g1"}
    assert _prune(k) == 1
    assert _chords(k) == set()


def test_an_empty_header_s_row_goes_once_successes_that_old_go(k: Harness) -> None:
    """A chord with an empty header has no member to be pruned with: its body is made at
    once, and its row goes by age, as a success closed then would (``succeeded``'s age;
    ``kernel prune``'s), through the index of such rows."""
    k.kernel.enqueue_many([], chord={"id": "g0", "body": _body("body-0")})
    assert k.keyed("body-0")
    k.clock.advance(DAY / 2)
    assert k.kernel.apply_retention({"succeeded": DAY})["occurrences"] == 0
    assert _chords(k) == {"g0"}
    assert k.kernel.apply_retention({"cancelled": DAY / 4})["occurrences"] == 0
    assert _chords(k) == {"g0"}  # successes are kept, and this row with them
    k.kernel.enqueue_many([], chord={"id": "g00", "body": _body("body-00")})
    k.clock.advance(DAY)
    k.kernel.apply_retention({"succeeded": DAY})
    assert _chords(k) == {"g00"}
    pruned = [e.data for e in k.kernel.events(limit=1000) if e.type == "history_pruned"]
    assert [p["chords"] for p in pruned] == [1]
    k.clock.advance(DAY / 4)
    with _captured(k.kernel.engine) as sent:
        k.kernel.prune(older_than=timedelta(hours=1))
    assert _chords(k) == set()
    [read] = [(sql, args) for sql, args in sent if "FROM chords" in sql and "'[]'" in sql]
    plan = "\n".join(_plan(k.kernel.engine, *read))
    assert "chords_empty" in plan, plan
    assert "TEMP B-TREE" not in plan and "Sort" not in plan, plan


def test_a_growing_chord_keeps_its_row_until_done(k: Harness) -> None:
    """An open chord's members wait for its close (retention keeps them), and its row
    with them; abandoned by its caller, it fails, and goes with its members."""
    k.kernel.enqueue_many([], chord={"id": "g2", "body": _body("body-2"), "open": True})
    [grown] = k.kernel.enqueue_many(_members(1, chord="g2"), chord={"id": "g2", "grow": "caller"})
    k.succeed(grown.occurrence_id, "grown")
    assert _prune(k) == 0
    assert _chords(k) == {"g2"}
    assert k.kernel.abandon_chord("g2")
    assert _prune(k) == 1
    assert _chords(k) == set()


def test_a_chord_s_row_goes_in_the_same_step_as_its_members_with_kernel_prune(
    k: Harness,
) -> None:
    """``kernel prune`` deletes the same way, and a chord whose members go over several
    steps loses its row in the step that deletes the last."""
    made = k.kernel.enqueue_many(_members(4), chord={"id": "g1", "body": _body()})
    for index, member in enumerate(made):
        k.succeed(member.occurrence_id, index)
        k.clock.advance(1)
    k.clock.advance(2 * DAY)
    assert k.kernel.prune(older_than=timedelta(days=1), limit=3)["occurrences"] == 3
    assert _chords(k) == {"g1"}
    assert k.kernel.prune(older_than=timedelta(days=1), limit=3)["occurrences"] == 1
    assert _chords(k) == set()


_SQLITE_SCAN = re.compile(r"^SCAN occurrences\b")
_PG_SCAN = re.compile(r"Seq Scan on occurrences\b")


def test_the_chord_delete_seeks_each_member_by_id(k: Harness) -> None:
    """The statement that decides which chord rows go looks each member up by its id:
    no scan of ``occurrences`` however much history there is."""
    made = k.kernel.enqueue_many(_members(3), chord={"id": "g1", "body": _body()})
    for index, member in enumerate(made):
        k.succeed(member.occurrence_id, index)
    engine = k.kernel.engine
    sent: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("DELETE FROM CHORDS"):
            sent.append((statement, parameters))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        assert _prune(k) == 3
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    assert _chords(k) == set()
    assert len(sent) == 1
    plan = _plan(engine, *sent[0])
    text = "\n".join(plan)
    scanning = _SQLITE_SCAN if k.backend == "sqlite" else _PG_SCAN
    assert not [line for line in plan if scanning.search(line.strip())], text
    seek = "USING INTEGER PRIMARY KEY" if k.backend == "sqlite" else "occurrences_pkey"
    assert seek in text, text
