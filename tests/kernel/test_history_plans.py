"""What status, the console, the exporter and ``why`` ask stays flat as history grows: every
statement they send is planned without a full scan of ``occurrences`` or ``events``.

Each reader runs against a kernel with a little of everything; every statement it sends is
captured on the engine and explained with its own parameters. PostgreSQL would scan tables
this small whatever the indexes, so there the question is whether an index *can* serve
(``enable_seqscan = off``), as in test_contract_job_health.py. On SQLite a ``SCAN`` of
either table is refused unless it walks a partial index that holds only unsettled rows:
those are bounded by live work, not by history.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from kernel import EnqueueRequest, Kernel
from kernel.db import driver
from kernel.states import SETTLED
from tests.kernel.conftest import Harness

#: Partial indexes over unsettled rows only: walking one whole is bounded by live work.
LIVE_INDEXES = (
    "occurrences_claimable",
    "occurrences_running",
    "occurrences_awaiting_approval",
    "occurrences_adjudication",
)
_SQLITE_SCAN = re.compile(rf"^SCAN (occurrences|events)\b(?!.* INDEX ({'|'.join(LIVE_INDEXES)})\b)")
_PG_SCAN = re.compile(r"Seq Scan on (occurrences|events)\b")
#: Rows put in order after they are read: a page of the newest then reads all that matches.
_SQLITE_SORT = re.compile(r"^USE TEMP B-TREE FOR (ORDER BY|RIGHT PART OF ORDER BY)")
_PG_SORT = re.compile(r"^(->\s*)?(Incremental )?Sort\b")
#: Reading history rather than live work: a table's rows through anything but a live index
#: or the rows of one key (an occurrence by id, its events).
_BOUNDED = "|".join((*LIVE_INDEXES, "events_occurrence", r"\w+_pkey"))
_SQLITE_HISTORY = re.compile(
    rf"^(SCAN|SEARCH) (occurrences|events)\b(?!.* INDEX ({_BOUNDED})\b)(?!.*PRIMARY KEY)"
)
_PG_HISTORY = re.compile(
    rf"(Index Scan|Index Only Scan) using (?!({_BOUNDED})\b)\w+ on (occurrences|events)\b"
    rf"|Bitmap Index Scan on (?!({_BOUNDED})\b)(occurrences|events)_\w+"
)

READERS: dict[str, Callable[[Kernel, int], object]] = {
    "status": lambda kernel, _: kernel.status(),
    "watchdog": lambda kernel, _: kernel.watchdog(grace=60),
    "job health": lambda kernel, _: kernel.job_health(),
    "a job's occurrences": lambda kernel, _: kernel.list_occurrences(job_id="job", limit=50),
    "event log": lambda kernel, _: kernel.events(after_id=0, limit=100),
    "newest events": lambda kernel, _: kernel.events(before_id=2**62, limit=100),
    "an occurrence's events": lambda kernel, occ: kernel.events(occurrence_id=occ, limit=1000),
    "last event id": lambda kernel, _: kernel.last_event_id(),
    "a job's revisions": lambda kernel, _: kernel.events(
        job_id="job", types=["job_defined", "job_revised"], before_id=2**62, limit=100
    ),
    "a job's claims": lambda kernel, _: kernel.events(
        job_id="job", types=["occurrence_claimed"], before_id=2**62, limit=100
    ),
    "runtime controls": lambda kernel, _: kernel.runtime_controls(limit=50),
    # The exporter's and the pools page's waiting counts per pool (one pool's: its limit set).
    "pools": lambda kernel, _: kernel.pools(),
    "a pool's limit": lambda kernel, _: kernel.set_pool_limit("gpu", 2),
    # Keys given again find their runs by (job, trigger key) (revision 0028).
    "an enqueue's keys again": lambda kernel, _: [
        kernel.enqueue_many([EnqueueRequest(task="t", key=f"k{i}") for i in range(3)])
        for _ in range(2)
    ],
}
#: Retention and ``kernel prune``: each step reads a status's oldest rows past an age while
#: it holds the writer lock, so it must not read (and sort) the status's whole history.
PRUNERS: dict[str, Callable[[Kernel, int], object]] = {
    "retention pass": lambda kernel, _: kernel.apply_retention(
        {"succeeded": 1, "cancelled": 1, "skipped": 1}
    ),
    "kernel prune": lambda kernel, _: kernel.prune(older_than=timedelta(seconds=1)),
}
# Not checked: the unfiltered occurrence list walks ids newest first (bounded by its LIMIT,
# which this check cannot tell from a full scan).


@contextmanager
def _captured(engine: sa.Engine) -> Iterator[list[tuple[str, Any]]]:
    """The reads and deletes sent on ``engine``, through Core or on the driver
    (DriverStatement, pipelined or not): a prune's deletes of what belonged to its runs
    must seek too, and so must an enqueue's search for the keys that exist."""
    sent: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "WITH", "DELETE")):
            sent.append((statement, parameters))

    send = driver.send

    def on_driver(conn: sa.Connection, sql: str, args: Any, *, fetch: bool) -> Any:
        if conn.engine is engine:
            record(conn, None, sql, args)
        return send(conn, sql, args, fetch=fetch)

    pipelined = driver.Pipeline.send

    def on_pipeline(pipe: Any, statement: driver.DriverStatement, params: Any) -> Any:
        conn = pipe._conn
        if conn.engine is engine and pipe._pipelined:  # else it runs through driver.send
            rendered = statement.rendered(conn.dialect)
            record(conn, None, rendered.sql, driver._args(rendered, params))
        return pipelined(pipe, statement, params)

    sa.event.listen(engine, "before_cursor_execute", record)
    driver.send = on_driver
    driver.Pipeline.send = on_pipeline  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        driver.send = send
        driver.Pipeline.send = pipelined  # type: ignore[method-assign]
        sa.event.remove(engine, "before_cursor_execute", record)


def _plan(engine: sa.Engine, statement: str, parameters: Any) -> list[str]:
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            rows = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)
            return [r[-1] for r in rows]
        conn.exec_driver_sql("SET enable_seqscan = off")
        conn.exec_driver_sql("SET enable_sort = off")
        return [r[0] for r in conn.exec_driver_sql(f"EXPLAIN {statement}", parameters)]


def _sorted_history(plan: list[str], backend: str) -> list[str]:
    """The sorts in ``plan`` of rows read from history: on SQLite a temporary B-tree in a
    plan that reads history; on PostgreSQL a Sort whose input is such a read."""
    if backend == "sqlite":
        if not any(_SQLITE_HISTORY.search(line.strip()) for line in plan):
            return []
        return [line for line in plan if _SQLITE_SORT.search(line.strip())]
    found = []
    for i, line in enumerate(plan):
        if _PG_SORT.search(line.strip()):
            depth = len(line) - len(line.lstrip())
            below = next(
                (
                    n
                    for n in plan[i + 1 :]
                    if n.strip().startswith("->") and len(n) - len(n.lstrip()) > depth
                ),
                "",
            )
            if _PG_HISTORY.search(below):
                found.append(f"{line.strip()} over {below.strip()}")
    return found


@pytest.fixture
def history(k: Harness) -> int:
    """A job with settled, failed, running, waiting and adjudication-bound occurrences;
    the id of a settled one."""
    settled = k.running().occurrence.id
    k.kernel.succeed(settled, owner="w1", fence=1)
    failed = k.running()
    k.kernel.fail(
        failed.occurrence.id, owner="w1", fence=failed.fence, code="X", message="x", retryable=False
    )
    k.running()
    k.occurrences("job", 2)
    return settled


@pytest.mark.parametrize("reader", [*READERS, *PRUNERS])
def test_readers_never_scan_history(k: Harness, history: int, reader: str) -> None:
    engine = k.kernel.engine
    if reader in PRUNERS:
        k.clock.advance(2)  # the settled run is older than the pruners' 1 s: it goes
    with _captured(engine) as sent:
        {**READERS, **PRUNERS}[reader](k.kernel, history)
    assert sent, f"{reader} sent no statement"
    scanning = _SQLITE_SCAN if k.backend == "sqlite" else _PG_SCAN
    for statement, parameters in sent:
        plan = _plan(engine, statement, parameters)
        bad = [line for line in plan if scanning.search(line.strip())]
        # A page of history that sorts what it read has read all of it first.
        bad += _sorted_history(plan, k.backend)
        assert not bad, f"{reader}: {statement}\n" + "\n".join(plan)


@pytest.mark.parametrize("pruner", PRUNERS)
def test_a_prune_reads_each_status_oldest_first_from_its_own_index(
    k: Harness, history: int, pruner: str
) -> None:
    """Retention's read of a status's oldest rows is a seek on ``occurrences_settled_by_status`` in
    settle order: no sort of the status's history, no scan, and not the job-led indexes that
    a job's health reads (test_contract_job_health.py holds health off this one)."""
    engine = k.kernel.engine
    with _captured(engine) as sent:
        PRUNERS[pruner](k.kernel, history)
    reads = [(s, p) for s, p in sent if "ORDER BY occurrences.settled_at" in s]
    assert reads, f"{pruner} read no status's oldest rows"
    for statement, parameters in reads:
        plan = _plan(engine, statement, parameters)
        text = "\n".join(plan)
        assert "occurrences_settled_by_status" in text, f"{statement}\n{text}"
        assert not any(_SQLITE_SORT.search(line.strip()) for line in plan), text
        assert not any(_PG_SORT.search(line.strip()) for line in plan), text


def test_status_counts_each_final_state_by_a_seek_on_its_status(k: Harness, history: int) -> None:
    """Each final state's capped count (kernel/reads.py) seeks its own rows on
    ``occurrences_settled_by_status``, keyed by the state: not a walk of an index that
    holds all history (PostgreSQL's ``enable_seqscan = off`` would let that pass the
    check above: an index scan with no key of its own is no sequential scan)."""
    engine = k.kernel.engine
    with _captured(engine) as sent:
        k.kernel.status()
    counts = [(s, p) for s, p in sent if all(f"'{state}'" in s for state in SETTLED)]
    assert counts, "status counted no final state"
    for statement, parameters in counts:
        plan = [line.strip() for line in _plan(engine, statement, parameters)]
        text = "\n".join(plan)
        if k.backend == "sqlite":
            seeks = [
                line
                for line in plan
                if re.match(r"SEARCH occurrences USING (COVERING )?INDEX "
                            r"occurrences_settled_by_status \(<expr>=\?\)", line)
            ]  # fmt: skip
        else:
            seeks = [
                below
                for line, below in zip(plan, plan[1:], strict=False)
                if "Scan using occurrences_settled_by_status" in line
                and below.startswith("Index Cond: (lower((status)::text) = '")
            ]
        assert len(seeks) == len(SETTLED), f"{statement}\n{text}"
