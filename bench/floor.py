"""The floor under a shallow run: two durable single-row writes on the bare driver, no kernel;
and on PostgreSQL the same with the kernel's own two statements.

Issue 22's decision makes a shallow run two durable commits, the claim before the body
and the settle after it. This task is a run that keeps only those two commits: one
row per pool process, updated by its key before and after the body, each write its
own durable transaction (SQLite: ``BEGIN IMMEDIATE`` in WAL mode with
``synchronous=FULL``; PostgreSQL: an autocommit statement on the durable server). No
events, no guards, no index but the key, no SQLAlchemy. ``end_to_end.py``'s **floor**
side publishes it as **plain** publishes ``bench.noop``, on the same worker: no design
that commits twice per run beats it on the same machine.

``floor_statements`` keeps the decision's statements themselves: the kernel's plain claim
(decision, fence, lease, attempt and event in one statement) and plain success (outcome,
guards and event), rendered once and sent on the bare driver around the body, on an
occurrence the message names. On PostgreSQL each is its transaction, events included,
so nothing of the kernel's Python or the worker's runtime is left. (SQLite's claim and
success are each a transaction of several statements composed by the kernel's Python:
not this side's.)
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
from collections.abc import Callable
from typing import Any

import psycopg

from bench.counter import bump
from bench.support import servers
from celery_app import app

__all__ = [
    "FLOOR_DATABASE",
    "FLOOR_STATEMENTS_TASK",
    "FLOOR_TASK",
    "connect",
    "floor",
    "database_beside",
    "floor_statements",
    "inserter",
    "prepare",
]

FLOOR_TASK = "bench.floor"
FLOOR_STATEMENTS_TASK = "bench.floor_statements"
#: The worker's environment variable naming the floor's database, a driver URL
#: (``postgresql://...`` or ``sqlite:///PATH``); ``end_to_end.py`` sets it.
FLOOR_DATABASE = "BENCH_FLOOR_DATABASE"

_TABLE = (
    "CREATE TABLE IF NOT EXISTS floor_runs"
    " (id INTEGER PRIMARY KEY, status TEXT NOT NULL, fence INTEGER NOT NULL)"
)
_CLAIM = "UPDATE floor_runs SET status = 'running', fence = fence + 1 WHERE id = {p}"
_SETTLE = "UPDATE floor_runs SET status = 'succeeded' WHERE id = {p}"
_INSERT = "INSERT INTO floor_runs VALUES ({p}, 'queued', 0) ON CONFLICT DO NOTHING"


def database_beside(database_url: str) -> str:
    """Where the floor writes beside a kernel at ``database_url`` (a SQLAlchemy URL): the
    kernel's PostgreSQL database, or a SQLite file beside the kernel's (a driver URL)."""
    if database_url.startswith("postgresql"):
        return str(servers().libpq_url(database_url))
    return database_url.removesuffix(".db") + "-floor.db"


def prepare(database: str) -> None:
    """Create the floor's table (on SQLite in WAL mode) before the worker starts: two pool
    processes switching a new file to WAL at once can fail one of them with ``database is
    locked``, and its run would never count."""
    conn, _ = connect(database)
    try:
        if isinstance(conn, sqlite3.Connection):
            conn.execute("PRAGMA journal_mode=WAL")  # kept in the file
        conn.execute(_TABLE)
    finally:
        conn.close()


def connect(database: str) -> tuple[Any, str]:
    """An autocommit connection to ``database`` and its driver's placeholder."""
    if database.startswith("postgresql"):
        return psycopg.connect(database, autocommit=True), "%s"
    path = database.removeprefix("sqlite:///")
    conn = sqlite3.connect(path, isolation_level=None, timeout=60)
    conn.execute("PRAGMA synchronous=FULL")
    return conn, "?"


class _Row:
    """This process's connection and its row of ``floor_runs``."""

    def __init__(self, database: str, row: int) -> None:
        self.conn, mark = connect(database)
        self.key = (row,)
        # Rendered once: a run's two writes are all the floor may cost.
        self.claim, self.settle, insert = (sql.format(p=mark) for sql in (_CLAIM, _SETTLE, _INSERT))
        self.commit(insert, self.key)

    def commit(self, statement: str, params: tuple[int, ...]) -> None:
        _commit(self.conn, statement, params)


def _commit(conn: Any, statement: str, params: tuple[int, ...]) -> None:
    """``statement`` as one durable transaction."""
    if isinstance(conn, sqlite3.Connection):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(statement, params)
        conn.execute("COMMIT")
    else:
        conn.execute(statement, params)


def inserter(database: str) -> tuple[Callable[[int], None], Callable[[], None]]:
    """The floor under one enqueue (``bench/enqueue.py``): a call inserts row ``key`` of
    ``floor_runs`` (:func:`prepare`'s) as its own durable transaction; and the close of
    its connection."""
    conn, mark = connect(database)
    insert = _INSERT.format(p=mark)
    return lambda key: _commit(conn, insert, (key,)), conn.close


@functools.cache
def _row(pid: int) -> _Row:
    return _Row(os.environ[FLOOR_DATABASE], pid)


@app.task(name=FLOOR_TASK, ignore_result=True)
def floor(key: str, sleep_ms: float = 0) -> None:
    """The body between a durable write before it and one after it."""
    row = _row(os.getpid())
    row.commit(row.claim, row.key)
    bump(key, sleep_ms)
    row.commit(row.settle, row.key)


class _KernelStatements:
    """This process's connection and the kernel's plain claim and plain success, rendered
    for psycopg once, with their parameters as the kernel passes them."""

    def __init__(self, database: str) -> None:
        from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect

        from kernel.transitions import occurrences as T

        dialect = psycopg_dialect.dialect()
        owner = f"bench-floor:{os.getpid()}"
        claim, settle = (
            transition.statement["postgresql"].statement  # type: ignore
            for transition in (T.WORKER_CLAIMS_QUEUED, T.WORKER_SUCCEEDS_PLAIN)
        )
        claim_compiled, settle_compiled = (c.compile(dialect=dialect) for c in (claim, settle))
        self.claim, self.settle = claim_compiled.string, settle_compiled.string
        self.fence_at = list(claim.exported_columns.keys()).index("fence")
        # The values kernel/occurrences/claiming.py and kernel/occurrences/runs.py give them
        # for a run with no lease of the worker's own, the database's clock and a None result.
        self.claim_params: dict[str, Any] = dict(
            claim_compiled.construct_params(
                {
                    "occurrence_id": 0,
                    "now": None,
                    "owner": owner,
                    "owner_json": json.dumps(owner),
                    "lease_ms": None,
                }
            )
        )
        self.settle_params: dict[str, Any] = dict(
            settle_compiled.construct_params(
                {
                    "occurrence_id": 0,
                    "held_fence": 0,
                    "now": None,
                    "owner": owner,
                    "result_json": json.dumps(None),
                    "error_json": None,
                }
            )
        )
        self.conn = psycopg.connect(database, autocommit=True)

    def claim_run(self, occurrence_id: int) -> int:
        """Claim ``occurrence_id``; its fence."""
        self.claim_params["occurrence_id"] = occurrence_id
        row = self.conn.execute(self.claim, self.claim_params).fetchone()
        if row is None:
            raise RuntimeError(f"occurrence {occurrence_id} was not claimable")
        return int(row[self.fence_at])

    def succeed_run(self, occurrence_id: int, fence: int) -> None:
        self.settle_params.update(occurrence_id=occurrence_id, held_fence=fence)
        if not self.conn.execute(self.settle, self.settle_params).fetchall():
            raise RuntimeError(f"occurrence {occurrence_id} was not settled (fence {fence})")


@functools.cache
def _statements(pid: int) -> _KernelStatements:
    return _KernelStatements(os.environ[FLOOR_DATABASE])


@app.task(name=FLOOR_STATEMENTS_TASK, ignore_result=True)
def floor_statements(key: str, occurrence_id: int, sleep_ms: float = 0) -> None:
    """The body between the kernel's claim of ``occurrence_id`` and its success (bare driver)."""
    statements = _statements(os.getpid())
    fence = statements.claim_run(occurrence_id)
    bump(key, sleep_ms)
    statements.succeed_run(occurrence_id, fence)
