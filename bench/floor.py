"""The floor under a shallow run: two durable single-row writes on the bare driver, no kernel.

Issue 22's decision makes a shallow run two durable commits, the claim before the body
and the settle after it. This task is a run that keeps only those two commits: one
row per pool process, updated by its key before and after the body, each write its
own durable transaction (SQLite: ``BEGIN IMMEDIATE`` in WAL mode with
``synchronous=FULL``; PostgreSQL: an autocommit statement on the durable server). No
events, no guards, no index but the key, no SQLAlchemy. ``end_to_end.py``'s **floor**
side publishes it as **plain** publishes ``bench.noop``, on the same worker: no design
that commits twice per run beats it on the same machine.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
from typing import Any

import psycopg

from bench.counter import bump
from celery_app import app

__all__ = ["FLOOR_DATABASE", "FLOOR_TASK", "floor"]

FLOOR_TASK = "bench.floor"
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


class _Row:
    """This process's connection and its row of ``floor_runs``."""

    def __init__(self, database: str, row: int) -> None:
        self.conn: Any
        if database.startswith("postgresql"):
            self.conn, mark = psycopg.connect(database, autocommit=True), "%s"
        else:
            path = database.removeprefix("sqlite:///")
            self.conn, mark = sqlite3.connect(path, isolation_level=None, timeout=60), "?"
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=FULL")
        self.key = (row,)
        # Rendered once: a run's two writes are all the floor may cost.
        self.claim, self.settle, insert = (sql.format(p=mark) for sql in (_CLAIM, _SETTLE, _INSERT))
        # PostgreSQL: the other pool process may create it at the same moment.
        with contextlib.suppress(psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable):
            self.commit(_TABLE, ())
        self.commit(insert, self.key)

    def commit(self, statement: str, params: tuple[int, ...]) -> None:
        """``statement`` as one durable transaction."""
        if isinstance(self.conn, sqlite3.Connection):
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.execute(statement, params)
            self.conn.execute("COMMIT")
        else:
            self.conn.execute(statement, params)


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
