"""The statements a worker runs per task stay cheap for SQLite to run again and again."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from psycopg import _queries as psycopg_queries
from sqlalchemy.dialects import postgresql, sqlite

from kernel import EnqueueRequest, Kernel
from kernel import statements as st
from kernel.db.driver import DriverStatement, render_all
from kernel.records import OCCURRENCE_COLUMNS, dumps, occurrence_from_mapping
from kernel.statements.logged import INSERT_EVENT
from kernel.transitions import occurrences as T

#: A statement's rendering for psycopg (DriverStatement._rendered's key).
PSYCOPG = ("postgresql", "psycopg", "pyformat")


def _driver_statements() -> dict[str, DriverStatement]:
    found = {}
    for name in st.__all__:
        value = getattr(st, name)
        for key, statement in value.items() if isinstance(value, dict) else [(None, value)]:
            if isinstance(statement, DriverStatement):
                found[f"{name}[{key}]" if key else name] = statement
    return found


def test_no_driver_statement_binds_a_like_pattern() -> None:
    # SQLite re-prepares a statement whose LIKE pattern is a bound parameter at every
    # run: a bound pattern in the claim made its UPDATE cost three times the settle's.
    statements = _driver_statements()
    assert {"CLAIM", "SETTLE", "OCCURRENCE_FOR_CLAIM"} <= statements.keys()
    bound_like = re.compile(r"\bLIKE\s+\?")
    rendered = {
        name: str(s.statement.compile(dialect=sqlite.dialect()))
        for name, s in statements.items()
        if s.dialect in (None, "sqlite")
    }
    assert not [name for name, sql in rendered.items() if bound_like.search(sql)]
    # The claim does carry the disabled-job guard, as literals.
    assert "LIKE 'manual:%'" in rendered["CLAIM"] and "LIKE 'at:%'" in rendered["CLAIM"]


def test_render_all_renders_each_statement_for_its_own_dialect_only() -> None:
    # What a worker's main process does before it forks its pool (Kernel.prepare_fork):
    # every statement written for the dialect renders, and none written for the other.
    for dialect in (sqlite.dialect(), postgresql.psycopg.dialect()):
        assert render_all(dialect) > 0
        for name, statement in _driver_statements().items():
            rendered = {key[0] for key in statement._rendered}
            assert (dialect.name in rendered) == (statement.dialect in (None, dialect.name)), name


def test_warm_enqueue_claim_and_settle_send_nothing_through_core(kernel: Kernel) -> None:
    # Core's per-execution work (cache key, execution context, result set-up) cost more
    # CPU than the driver's own per statement (bench/cpu_per_op.py, issue 42): once a
    # process has defined a task's job, its enqueues and runs go on the driver only.
    kernel.enqueue(task="lean.task", args=[0])  # defines the task's implicit job
    through_core: list[str] = []

    def seen(conn: Any, statement: Any, *args: Any) -> None:
        through_core.append(str(statement))

    sa.event.listen(kernel.engine, "before_execute", seen)
    try:
        one = kernel.enqueue(task="lean.task", args=[1])
        many = kernel.enqueue_many([EnqueueRequest("lean.task", [i]) for i in range(3)])
        for made in (one, *many):
            claim = kernel.claim(made.occurrence_id, owner="w", lease=30)
            assert claim is not None
            kernel.succeed(made.occurrence_id, owner="w", fence=claim.fence, result=made.job_id)
    finally:
        sa.event.remove(kernel.engine, "before_execute", seen)
    assert through_core == []
    assert kernel.get_occurrence(many[2].occurrence_id).result == "task:lean.task"


def test_psycopg_converts_each_driver_statement_once_per_process() -> None:
    # psycopg parses a query's placeholders again at every execution when its text is
    # longer than its cache's limit: 53 and 92 µs of CPU for the claim and a batch's
    # settle-and-claim on every run (bench/cpu_per_op.py, issue 42).
    render_all(postgresql.psycopg.dialect())  # the first render of each lets psycopg cache it
    limit = psycopg_queries.MAX_CACHED_STATEMENT_LENGTH
    longer = {
        name: len(s._rendered[PSYCOPG].sql.encode())
        for name, s in _driver_statements().items()
        if s.dialect in (None, "postgresql")
    }
    assert {name: n for name, n in longer.items() if n > limit} == {}
    binds = {
        name: len(set(re.findall(r"%\((\w+)\)s", s._rendered[PSYCOPG].sql)))
        for name, s in _driver_statements().items()
        if s.dialect in (None, "postgresql")
    }
    assert max(binds.values()) <= psycopg_queries.MAX_CACHED_STATEMENT_PARAMS


def test_one_enqueued_row_binds_its_values_not_arrays_on_postgresql() -> None:
    # psycopg's dumping of one array per column cost more CPU than the INSERT of one row;
    # a batch is one statement whatever its size (one plan).
    one, many = (st.enqueue_occurrences("postgresql", n) for n in (1, 2))
    sql = {s: s.statement.compile(dialect=postgresql.psycopg.dialect()).string for s in (one, many)}
    assert "unnest" not in sql[one] and "ROWS FROM" not in sql[one]
    assert "ROWS FROM" in sql[many]
    assert st.enqueue_occurrences("postgresql", 3) is many
    assert set(st.enqueue_params("postgresql", [{n: 1 for n in st.ENQUEUE_COLUMNS}])) == {
        f"{name}_0" for name in st.ENQUEUE_COLUMNS
    }


def test_a_batch_is_json_parameters_on_postgresql() -> None:
    # psycopg escapes every quote of a text array's elements through re.sub: for 500 runs'
    # definitions (JSON, full of quotes) that was more CPU than everything else of the
    # batch. The rows and their templates (what runs of a task share, once each) go as
    # JSON texts, one per column, which the server zips by ROWS FROM.
    rows = [{**{name: None for name in st.ENQUEUE_COLUMNS}, "definition": "{}"}] * 2
    params = st.enqueue_params("postgresql", rows)
    assert all(isinstance(value, str) for value in params.values())
    templates = [json.loads(v) for name, v in params.items() if name.startswith("template_")]
    assert templates and all(len(column) == 1 for column in templates)  # the rows' one


def test_a_batchs_values_arrive_as_given(kernel: Kernel) -> None:
    odd = ['quote " backslash \\ slash / é 漢 🎉', {"nested": ['"x"', "\\n", "\t"]}, 2**62, None]
    made = kernel.enqueue_many(
        [EnqueueRequest("lean.odd", odd, {"k": odd}, key=f'k"\\{i}é') for i in range(3)]
    )
    for i, answer in enumerate(made):
        occurrence = kernel.get_occurrence(answer.occurrence_id)
        assert occurrence.payload["args"] == odd and occurrence.payload["kwargs"] == {"k": odd}
        assert occurrence.trigger_key == f'key:k"\\{i}é'


def test_a_batch_is_one_statement_up_to_max_rows() -> None:
    # One statement per dialect for every batch size (its rows are one JSON text).
    assert st.enqueue_occurrences("sqlite", 2) is st.enqueue_occurrences("sqlite", 499)
    assert st.enqueue_chunks(1) == [(0, 1)]
    assert st.enqueue_chunks(st.MAX_ROWS + 1) == [(0, st.MAX_ROWS), (st.MAX_ROWS, 1)]


def test_a_batch_across_chunks_dedupes_in_order(kernel: Kernel) -> None:
    keys = [f"k{i % 290}" for i in range(300)]  # the last ten repeat the first ten
    made = kernel.enqueue_many(
        [EnqueueRequest("lean.chunks", [i], key=k) for i, k in enumerate(keys)]
    )
    assert [m.deduplicated for m in made] == [False] * 290 + [True] * 10
    assert [m.occurrence_id for m in made[290:]] == [m.occurrence_id for m in made[:10]]
    assert kernel.get_occurrence(made[295].occurrence_id).payload["args"] == [5]


@contextmanager
def _round_trips(kernel: Kernel) -> Iterator[Callable[[], int]]:
    """The server's answers (libpq's ``ReadyForQuery``: one per round trip) on the
    kernel's held connection while the block runs; the count is read after it."""
    held = kernel._session._held.conn
    assert held is not None, "the kernel has written once: its connection is held"
    pgconn = held.connection.dbapi_connection.pgconn  # type: ignore[union-attr]
    with tempfile.TemporaryFile() as out:
        pgconn.trace(os.dup(out.fileno()))
        counted: list[int] = []
        try:
            yield lambda: counted[0]
        finally:
            pgconn.untrace()  # flushes the trace
            out.seek(0)
            counted.append(out.read().count(b"\tReadyForQuery"))


def test_a_warm_enqueue_is_one_round_trip_on_postgresql(pg_database_url: str) -> None:
    # Issue 42: BEGIN, the server's clock, the INSERT, its event and COMMIT were five
    # round trips per enqueue. Now the statement reads the clock, writes the event and
    # answers a key that exists, and is sent as its own transaction.
    kernel = Kernel.open(pg_database_url, migrate_schema=True)
    try:
        kernel.enqueue(task="lean.one", args=[0])  # defines the task's implicit job
        # Warm: a statement runs unprepared the first time a connection sends it, and is
        # prepared (one more round trip, once) the second (kernel/db/prepared.py).
        for _ in range(2):
            kernel.enqueue(task="lean.one", args=[0], key="k0")
            kernel.enqueue(task="lean.one", args=[0], countdown=60)
        with _round_trips(kernel) as trips:
            made = kernel.enqueue(task="lean.one", args=[1], key="k1")
        assert trips() == 1 and not made.deduplicated and made.claimable
        with _round_trips(kernel) as trips:
            again = kernel.enqueue(task="lean.one", args=[1], key="k1")
        assert trips() == 1 and again.deduplicated
        assert again.occurrence_id == made.occurrence_id and not again.claimable
        with _round_trips(kernel) as trips:
            later = kernel.enqueue(task="lean.one", args=[2], countdown=60)
        assert trips() == 1 and not later.claimable and later.not_before is not None
        occurrence = kernel.get_occurrence(later.occurrence_id)
        assert occurrence.available_at == later.not_before == occurrence.scheduled_for
        assert later.not_before - occurrence.created_at == timedelta(seconds=60)
        [created] = kernel.events(occurrence_id=made.occurrence_id)
        assert created.type == "occurrence_created" and created.at == (
            kernel.get_occurrence(made.occurrence_id).created_at
        )
        assert created.data == {
            "enqueued": True, "revision": 1, "trigger_key": "key:k1",
            "scheduled_for": int(created.at.timestamp() * 1000),
        }  # fmt: skip
    finally:
        kernel.close()


def test_a_batch_is_one_insert_of_its_runs_on_sqlite(tmp_path: Path) -> None:
    # Issue 42 item 2: a SQLite batch was one SELECT per row, split into powers of two
    # (500 runs: six INSERTs, each statement kept per row count); its rows are now one
    # JSON text read by json_each, as PostgreSQL reads them by json_to_recordset.
    kernel = Kernel.open(f"sqlite:///{tmp_path / 'k.db'}", migrate_schema=True)
    try:
        kernel.enqueue(task="lean.bulk", args=[0])  # defines the task's implicit job
        held = kernel._session._held.conn
        assert held is not None
        sent: list[str] = []
        held.connection.dbapi_connection.set_trace_callback(sent.append)  # type: ignore[union-attr]
        made = kernel.enqueue_many([EnqueueRequest("lean.bulk", [i]) for i in range(500)])
        held.connection.dbapi_connection.set_trace_callback(None)  # type: ignore[union-attr]
        inserts = [s for s in sent if s.lstrip().upper().startswith("INSERT INTO OCCURRENCES")]
        assert len(inserts) == 1
        assert len({m.occurrence_id for m in made}) == 500
        assert kernel.get_occurrence(made[499].occurrence_id).payload["args"] == [499]
    finally:
        kernel.close()


def test_a_warm_batch_is_one_statement_in_one_transaction_on_postgresql(
    pg_database_url: str,
) -> None:
    kernel = Kernel.open(pg_database_url, migrate_schema=True)
    try:
        kernel.enqueue(task="lean.bulk", args=[0])  # defines the task's implicit job
        with _round_trips(kernel) as trips:
            made = kernel.enqueue_many([EnqueueRequest("lean.bulk", [i]) for i in range(500)])
        assert trips() == 3  # BEGIN, the statement (events and all), COMMIT
        assert len({m.occurrence_id for m in made}) == 500
        events = kernel.events(occurrence_id=made[7].occurrence_id)
        assert [e.type for e in events] == ["occurrence_created"]
    finally:
        kernel.close()


def test_a_connection_keeps_one_cursor_for_its_driver_statements(kernel: Kernel) -> None:
    # A cursor per statement cost each run's statements their driver's cursor set-up
    # (psycopg's adaptation; sqlite3's cursor object: 0.3 µs a statement, eight a run on
    # SQLite, bench/README.md session 20). A replaced connection gets a new one.
    params = {"occurrence_id": 1, "now": 0}
    with kernel.engine.connect() as conn:
        assert st.OCCURRENCE_FOR_CLAIM.first(conn, params) is None
        kept = conn.connection.info["kernel_cursor"]
        assert st.OCCURRENCE_FOR_CLAIM.first(conn, params) is None
        assert conn.connection.info["kernel_cursor"] is kept
        conn.invalidate()
        assert st.OCCURRENCE_FOR_CLAIM.first(conn, params) is None
        assert conn.connection.info["kernel_cursor"] is not kept


def test_a_plain_claim_and_success_skip_the_statement_wrappers(kernel: Kernel) -> None:
    # The lane of a plain run (kernel/transitions/fast_lane.py): its statements go to the
    # kept cursor as text rendered once, its rows are read by position; DriverStatement's
    # per-call work (defaults merged, processors, a Row per row), door and Tx.emit were
    # the largest Python part of a run after the statements (bench/README.md session 21).
    first = kernel.enqueue(task="lean.task", args=[0])
    claim = kernel.claim(first.occurrence_id, owner="w", lease=30)
    assert claim is not None
    kernel.succeed(first.occurrence_id, owner="w", fence=claim.fence, result=None)
    made = kernel.enqueue(task="lean.task", args=[1])
    batch, after = (kernel.enqueue(task="lean.task", args=[i]) for i in (2, 3))
    held = kernel.claim(batch.occurrence_id, owner="b", lease=30)
    assert held is not None
    wrapped: list[str] = []
    original = DriverStatement._run

    def counted(self: DriverStatement, *args: Any, **kwargs: Any) -> Any:
        wrapped.append(str(self.statement)[:40])
        return original(self, *args, **kwargs)

    # A write transaction begins and ends on the driver on both back ends: SQLAlchemy's
    # begin and commit machinery is for the Core statements a transaction may run.
    began: list[object] = []

    def begin(conn: sa.Connection) -> None:
        began.append(conn)

    sa.event.listen(kernel.engine, "begin", begin)
    DriverStatement._run = counted  # type: ignore[method-assign]
    try:
        claim = kernel.claim(made.occurrence_id, owner='w\u00e9"', lease=30)
        assert claim is not None
        kernel.succeed(made.occurrence_id, owner='w\u00e9"', fence=claim.fence, result=[1])
        # A batch's step too on PostgreSQL, where it is one statement.
        step = kernel.succeed_and_claim(
            batch.occurrence_id, owner="b", fence=held.fence, next_occurrence_id=after.occurrence_id
        )
        assert step is not None and step.occurrence.id == after.occurrence_id
    finally:
        DriverStatement._run = original  # type: ignore[method-assign]
        sa.event.remove(kernel.engine, "begin", begin)
    assert wrapped == [] and began == []
    # The lane hands its binds to the driver unprocessed: their types must need nothing.
    dialect = kernel.engine.dialect
    for transition in (T.WORKER_CLAIMS_QUEUED, T.WORKER_SUCCEEDS_PLAIN):
        assert not transition.statement[dialect.name].rendered(dialect).bind_processors
    assert not INSERT_EVENT.rendered(dialect).bind_processors
    done = kernel.get_occurrence(made.occurrence_id)
    assert (done.status, done.result, done.attempt) == ("succeeded", [1], 1)
    assert claim.occurrence.lease_owner == 'w\u00e9"' and claim.fence == 1
    with kernel.engine.connect() as conn:
        events = conn.execute(
            sa.text("SELECT type, fence, data FROM events WHERE occurrence_id = :o ORDER BY id"),
            {"o": made.occurrence_id},
        ).all()
    # The text every back end writes, and the general path wrote before the lane.
    claimed = {
        "attempt": 1,
        "owner": 'w\u00e9"',
        "previous_owner": None,
        "previous_status": "queued",
    }
    assert [tuple(e) for e in events[1:]] == [
        ("occurrence_claimed", 1, dumps(claimed)),
        ("occurrence_succeeded", 1, dumps({"attempt": 1})),
    ]


def test_a_queued_claim_returns_only_what_its_occurrence_is_built_from() -> None:
    # Every other column of the row cost the driver a value per claim, inside SQLite's
    # writer gate, and nothing a claim answers read it (bench/README.md, session 23).
    read: list[str] = []

    class Recording(dict[str, Any]):
        def __getitem__(self, key: str) -> Any:
            read.append(key)
            return super().__getitem__(key)

    row = {name: None for name in OCCURRENCE_COLUMNS}
    row |= {"status": "running", "definition": "{}", "cancel_requested": 0}
    row |= {"scheduled_for": 0, "available_at": 0, "created_at": 0, "updated_at": 0}
    occurrence_from_mapping(Recording(row))
    assert sorted(set(read)) == sorted(OCCURRENCE_COLUMNS)
    claimed = (*OCCURRENCE_COLUMNS, "now")
    for dialect in (sqlite.dialect(), postgresql.psycopg.dialect()):
        statement = st.CLAIM_QUEUED_BY_DIALECT[dialect.name]
        assert statement.rendered(dialect).keys == claimed
    both = st.SUCCEED_AND_CLAIM_QUEUED.rendered(postgresql.psycopg.dialect()).keys
    assert both == ("settled_attempt", *claimed)
