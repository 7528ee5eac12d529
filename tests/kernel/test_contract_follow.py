"""Following the event log (issue 39 item 5): a follower delivers every committed event
once, in commit order, even when a transaction commits after a later id did (PostgreSQL
hands out ids from a sequence; SQLite serialises writers, so its ids commit in order)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pytest
import sqlalchemy as sa

from kernel import EventCursor, InvalidArgument
from kernel.types import Event

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness

HELD, LATER = "proj.held", "proj.later"


class Follower:
    """What ``events --follow``, ``/live`` and the exporter do: read, keep the cursor."""

    def __init__(self, k: Harness, limit: int = 1000) -> None:
        self.kernel, self.limit = k.kernel, limit
        self.cursor = k.kernel.event_cursor()
        self.delivered: list[Event] = []

    def poll(self) -> list[Event]:
        page, self.cursor = self.kernel.follow_events(self.cursor, limit=self.limit)
        self.delivered += page
        return page

    def drain(self) -> None:
        while len(self.poll()) == self.limit:
            pass


@contextmanager
def held_enqueue(k: Harness) -> Iterator[int]:
    """An enqueue of ``HELD`` in a caller's transaction left open on its own connection
    until the block ends, when it commits. SQLite has one writer: it commits at once."""
    engine = sa.create_engine(k.url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            trans = conn.begin()
            made = k.kernel.enqueue(task=HELD, connection=conn)
            assert made.occurrence_id is not None
            if k.backend == "sqlite":
                trans.commit()
            yield made.occurrence_id
            if trans.is_active:
                trans.commit()
    finally:
        engine.dispose()


def _created(events: list[Event]) -> list[int | None]:
    return [e.occurrence_id for e in events if e.type == "occurrence_created"]


def test_a_late_commit_is_delivered_once_and_in_commit_order(k: Harness) -> None:
    for task in (HELD, LATER):  # their implicit jobs exist before the race
        k.kernel.enqueue(task=task)
    follower = Follower(k)
    with held_enqueue(k) as held:
        later = k.kernel.enqueue(task=LATER).occurrence_id
        follower.poll()
        assert (held in _created(follower.delivered)) == (k.backend == "sqlite")
    follower.poll()
    follower.poll()

    committed = [e for e in k.kernel.events(limit=1000) if e.occurrence_id in (held, later)]
    ids = [e.id for e in follower.delivered]
    assert sorted(ids) == sorted(e.id for e in committed) and len(set(ids)) == len(ids)
    in_commit_order = [held, later] if k.backend == "sqlite" else [later, held]
    assert _created(follower.delivered) == in_commit_order
    if k.backend == "postgres":  # the interleaving really happened: ids say otherwise
        assert held < later  # type: ignore[operator]


def test_a_follower_pages_filters_and_resumes_from_its_token(k: Harness) -> None:
    everything = Follower(k, limit=2)
    start = everything.cursor
    made = [k.kernel.enqueue(task=HELD).occurrence_id for _ in range(3)]
    k.kernel.enqueue(task=LATER)
    resumed = Follower(k, limit=2)
    resumed.cursor = EventCursor.parse(start.token)
    everything.drain()
    resumed.drain()
    assert [e.id for e in resumed.delivered] == [e.id for e in everything.delivered]
    assert [e.id for e in everything.delivered] == sorted(e.id for e in everything.delivered)
    assert _created(everything.delivered)[:3] == made
    page, cursor = k.kernel.follow_events(start, job_id=f"task:{HELD}", limit=1000)
    assert {e.job_id for e in page} == {f"task:{HELD}"} and _created(page) == made
    assert k.kernel.follow_events(cursor, job_id=f"task:{HELD}", limit=1000)[0] == []
    oldest, _ = k.kernel.follow_events(limit=1000)  # no cursor: the whole kept log
    assert oldest == k.kernel.events(limit=1000)
    by_id, _ = k.kernel.follow_events(EventCursor.parse(str(oldest[-2].id)), limit=1000)
    assert by_id == oldest[-1:]  # an event id is a token: `events --after ID` still works


def test_a_cursor_that_is_no_token_is_refused(k: Harness) -> None:
    bad = ("", "x", "1@2", "1@1:2:3@4:5:6@", "-1", "1@1:2:a", "\u0663", "9" * 19, "1@5:3:",
           "1@0:3:", "1@3:9:9", "1@3:9:5,4", "1@1:2:" + "1," * 5000)  # fmt: skip
    for token in bad:
        with pytest.raises(InvalidArgument, match="cursor"):
            EventCursor.parse(token)
    snapshot = EventCursor.parse("3@10:12:11")
    assert snapshot == EventCursor(3, "10:12:11") and snapshot.token == "3@10:12:11"
    assert EventCursor.parse("0@@10:10:").token == "0@@10:10:"
    if k.backend == "sqlite":
        with pytest.raises(InvalidArgument, match="PostgreSQL cursor"):
            k.kernel.follow_events(snapshot)
    else:  # every snapshot the parser accepts, the server takes
        for token in ("3@10:12:11", "0@@5:5:", "0@5:9:5,5,8@9:9:"):
            k.kernel.follow_events(EventCursor.parse(token))


def test_rows_restored_from_another_cluster_are_delivered_once(k: Harness) -> None:
    """A dump restored into a new cluster keeps its rows' transaction ids, past every
    transaction the new server has started: they are old, committed events."""
    made = [k.kernel.enqueue(task=HELD).occurrence_id for _ in range(2)]
    before = Follower(k)
    if k.backend == "postgres":
        with k.kernel.engine.begin() as conn:
            conn.execute(sa.text("UPDATE events SET xact = 1000000000000"))
    fresh = Follower(k)
    fresh.cursor = EventCursor()
    fresh.drain()
    assert _created(fresh.delivered) == made
    later = k.kernel.enqueue(task=HELD).occurrence_id
    for follower in (before, fresh):
        follower.drain()
        assert _created(follower.delivered)[-1:] == [later]
    assert _created(before.delivered) == [later]
