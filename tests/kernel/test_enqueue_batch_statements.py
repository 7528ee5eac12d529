"""A batch's enqueue on SQLite is a handful of statements whatever its size (issue 42
item 2): its rows in one INSERT, their events in one more; PostgreSQL's statement writes
both (tests/kernel/test_contract_enqueue.py checks the events' data on both)."""

from __future__ import annotations

import json
import sqlite3
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
import sqlalchemy as sa

from kernel import EnqueueRequest
from kernel.db.driver import _args
from kernel.db.schema import occurrences
from kernel.spec import task_runs
from kernel.spec.enqueue_request import prepare
from kernel.statements import enqueues as st
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
        batch = list(sent)  # not what the reads and the close send after it
        events = [kernel.events(occurrence_id=m.occurrence_id) for m in made]
    finally:
        kernel.close()
    assert len(batch) <= 4, batch[:6]  # BEGIN, the rows, their events, COMMIT
    assert [[e.type for e in each] for each in events] == [["occurrence_created"]] * 300
    assert [each[0].data.get("priority") for each in events] == [i % 3 or None for i in range(300)]


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_a_batch_sends_each_definition_template_once(dialect: str) -> None:
    # A run's definition is its task's spec around the run's own arguments: a batch of one
    # task carried that spec (about 0.5 kB) once per row, half of its JSON text, which the
    # caller encoded and the server parsed every time (bench/enqueue_explain.py).
    specs: dict[str, dict[str, Any]] = {}
    rows = [prepare(EnqueueRequest(TASK, [i], {"n": i}), specs, True).values for i in range(50)]
    head, own, tail = rows[7]["definition_parts"]
    assert rows[7]["definition"] == head + own + tail and len(head) > 100
    params = st.enqueue_params(dialect, rows).values()
    sent = _texts([json.loads(p) if isinstance(p, str) else p for p in params])
    assert sum(head in text for text in sent) == 1
    assert sum(tail in text for text in sent) == 1


def _texts(value: Any) -> list[str]:
    """Every string in ``value``, at any depth."""
    if isinstance(value, list | tuple):
        return [text for item in value for text in _texts(item)]
    return [value] if isinstance(value, str) else []


def test_a_batchs_definitions_are_the_single_calls(k: Harness) -> None:
    # The batch's definitions, spliced by the server from their templates, are the text a
    # single call stores: runs of two tasks, with their own queues, time limits and
    # request fields, quotes and backslashes in their arguments.
    def runs(tag: str) -> list[EnqueueRequest]:
        return [
            EnqueueRequest(
                TASK if i % 3 else "proj.other",
                [i, 'q"\\é'],
                {"k": [tag]} if i % 2 else None,
                queue=None if i % 4 else "elsewhere",
                timeout=None if i % 5 else 7.5,
                request={"argsrepr": f"({i})"} if i % 6 == 1 else None,
            )
            for i in range(24)
        ]

    batch = k.kernel.enqueue_many(runs("same"))
    single = [k.kernel.enqueue_many([run])[0] for run in runs("same")]
    with k.kernel.engine.connect() as conn:
        text = dict(conn.execute(sa.select(occurrences.c.id, occurrences.c.definition)).all())
    assert [text[m.occurrence_id] for m in batch] == [text[m.occurrence_id] for m in single]
    assert [k.kernel.get_occurrence(m.occurrence_id).payload["args"] for m in batch[:2]] == [
        [0, 'q"\\é'],
        [1, 'q"\\é'],
    ]


def test_a_batchs_rows_are_the_single_calls(k: Harness) -> None:
    # What runs of a task share goes once per template (job, queue, delivery, priority,
    # expiry, ...): runs that differ in each of them, interleaved, are stored as single
    # calls store them, column by column, their times relative to their creation.
    def runs() -> list[EnqueueRequest]:
        return [
            EnqueueRequest(
                TASK if i % 3 else "proj.other",
                [i],
                queue=None if i % 4 else "elsewhere",
                delivery="at-most-once" if i % 5 == 2 else None,
                countdown=None if i % 6 else 30,
                priority=None if i % 7 else 9,
                expires=None if i % 8 else 600,
                timeout=None if i % 5 else 7.5,
            )
            for i in range(30)
        ]

    batch = k.kernel.enqueue_many(runs())
    single = [k.kernel.enqueue_many([run])[0] for run in runs()]
    skipped = {"id", "trigger_key", "idempotency_key", "updated_at", "created_at"}
    times = ("scheduled_for", "available_at", "dispatched_at", "expires_at")
    columns = [c for c in occurrences.c if c.name not in skipped and c.name not in times]
    relative = [(c - occurrences.c.created_at).label(c.name) for c in map(occurrences.c.get, times)]
    with k.kernel.engine.connect() as conn:
        stored = {
            row[0]: row[1:]
            for row in conn.execute(sa.select(occurrences.c.id, *columns, *relative))
        }
    assert len({stored[m.occurrence_id] for m in batch}) > 8  # the runs do differ
    ids = [m.occurrence_id for m in batch]
    assert ids == sorted(ids)  # made in the requests' order, whatever their templates
    assert [stored[m.occurrence_id] for m in batch] == [stored[m.occurrence_id] for m in single]


def test_a_batch_answers_existing_keys_generated_or_given(
    k: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # PostgreSQL's statement seeks an existing row only for a caller's key; a generated
    # key that exists (two calls in one millisecond drawing the same 80 bits, forced
    # here) is found by the read after it. Either way the run is the earlier one's.
    first = k.kernel.enqueue_many([EnqueueRequest(TASK, [0], key="given")])[0]
    # The generated key's own millisecond and bits, the same each call (this module's only).
    monkeypatch.setattr(task_runs, "os", SimpleNamespace(urandom=lambda n: b"\x07" * n))
    monkeypatch.setattr(task_runs, "time", SimpleNamespace(time_ns=lambda: 1_800 * 10**15))
    drawn = k.kernel.enqueue_many([EnqueueRequest(TASK, [1])])[0]
    batch = k.kernel.enqueue_many(
        [EnqueueRequest(TASK, [2], key="given"), EnqueueRequest(TASK, [3]),
         EnqueueRequest(TASK, [4], key="new")]
    )  # fmt: skip
    assert [(m.occurrence_id, m.deduplicated) for m in batch[:2]] == [
        (first.occurrence_id, True),
        (drawn.occurrence_id, True),
    ]
    assert not batch[2].deduplicated
    assert batch[1].trigger_key == drawn.trigger_key != first.trigger_key


def test_a_batch_seeks_existing_rows_for_callers_keys_only(k: Harness) -> None:
    if k.backend != "postgres":
        pytest.skip("PostgreSQL's statement answers existing keys; SQLite's caller reads them")
    keyed = [EnqueueRequest(TASK, [i], key=f"k{i}") for i in range(5)]
    k.kernel.enqueue_many(keyed)
    specs: dict[str, dict[str, Any]] = {}
    requests = [*keyed, *(EnqueueRequest(TASK, [i]) for i in range(40))]
    rows = [prepare(request, specs, True).values for request in requests]
    params = {**st.enqueue_params("postgresql", rows), "now": None}
    with k.kernel.engine.connect() as conn:
        statement = st.enqueue_occurrences("postgresql", len(rows))
        rendered = statement.rendered(conn.dialect)
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {rendered.sql}", _args(rendered, params))
        explained = cursor.fetchone()
        conn.rollback()
    assert explained is not None
    (plan,) = explained[0]
    seeks = [node for node in _nodes(plan["Plan"]) if node.get("Alias") == "existing"]
    assert sum(node["Actual Loops"] for node in seeks) == len(keyed)


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    """A plan node and every node under it."""
    return [node, *(n for child in node.get("Plans", ()) for n in _nodes(child))]
