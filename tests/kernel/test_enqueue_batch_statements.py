"""A batch's enqueue on SQLite is a handful of statements whatever its size (issue 42
item 2): its rows in one INSERT, their events in one more; PostgreSQL's statement writes
both (tests/kernel/test_contract_enqueue.py checks the events' data on both)."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

import pytest

from kernel import EnqueueRequest
from kernel.store import Kernel

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness

TASK = "proj.batch"


def test_a_batch_on_sqlite_is_a_handful_of_statements(
    k: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    if k.backend != "sqlite":
        pytest.skip("SQLite's statements; PostgreSQL's batch is one statement with its events")
    opened: list[sqlite3.Connection] = []
    connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        opened.append(connect(*args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(sqlite3.dbapi2, "connect", traced)  # the name SQLAlchemy calls
    kernel = Kernel.open(k.url)
    try:
        kernel.enqueue(task=TASK, args=["first"])  # defines the task's job
        sent: list[str] = []
        for conn in opened:
            conn.set_trace_callback(sent.append)
        made = kernel.enqueue_many([EnqueueRequest(TASK, [i], priority=i % 3) for i in range(300)])
        events = [kernel.events(occurrence_id=m.occurrence_id) for m in made]
    finally:
        kernel.close()
    assert len(sent) <= 4, sent[:6]  # BEGIN, the rows, their events, COMMIT
    assert [[e.type for e in each] for each in events] == [["occurrence_created"]] * 300
    assert [each[0].data.get("priority") for each in events] == [i % 3 or None for i in range(300)]
