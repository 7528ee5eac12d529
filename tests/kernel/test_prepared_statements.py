"""The kernel's statements on PostgreSQL run as prepared statements of their own
(kernel/db/prepared.py), with the answers and errors psycopg's cursor gives."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import closing, contextmanager
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from kernel import EnqueueRequest, Kernel
from kernel import statements as st
from kernel.db.engine import create_kernel_engine
from kernel.db.prepared import _query


@pytest.fixture
def pg_kernel(pg_database_url: str) -> Iterator[Kernel]:
    with closing(Kernel.open(pg_database_url, migrate_schema=True)) as kernel:
        yield kernel


@contextmanager
def _sent(kernel: Kernel) -> Iterator[list[bytes]]:
    """The protocol messages the kernel's held connection sends while the block runs."""
    held = kernel._session._held.conn
    assert held is not None, "the kernel has written once: its connection is held"
    pgconn: Any = held.connection.dbapi_connection.pgconn  # type: ignore[union-attr]
    lines: list[bytes] = []
    with tempfile.TemporaryFile() as out:
        pgconn.trace(os.dup(out.fileno()))
        try:
            yield lines
        finally:
            pgconn.untrace()
            out.seek(0)
            lines.extend(line for line in out.read().splitlines() if b"\tF\t" in line)


def _pair(kernel: Kernel, n: int) -> None:
    made = kernel.enqueue(task="prepared.pair", args=[n])
    claim = kernel.claim(made.occurrence_id, owner="w", lease=30)
    assert claim is not None and claim.occurrence.payload["args"] == [n]
    assert claim.occurrence.scheduled_for.tzinfo is not None  # loaded as the cursor loads it
    kernel.succeed(made.occurrence_id, owner="w", fence=claim.fence, result={"n": n})
    assert kernel.get_occurrence(made.occurrence_id).result == {"n": n}


def test_a_run_is_bound_to_the_kernels_own_prepared_statements(pg_kernel: Kernel) -> None:
    for n in range(3):  # the first run of each statement is unprepared, the second prepares
        _pair(pg_kernel, n)
    with _sent(pg_kernel) as sent:
        _pair(pg_kernel, 3)
    binds = [line for line in sent if b"\tBind\t" in line]
    assert binds and all(re.search(rb'"kernel_\d+"', line) for line in binds), sent
    assert not [line for line in sent if b"\tParse\t" in line], "nothing parsed again"


def test_a_rolled_back_transaction_keeps_the_prepared_statements(pg_kernel: Kernel) -> None:
    # psycopg's own prepared statements (a query run five times) end each rolled-back
    # transaction with DEALLOCATE ALL, which took the kernel's with them ("prepared
    # statement kernel_0 does not exist" in the next one): the kernel's engine turns
    # psycopg's off.
    params = {"occurrence_id": 1, "now": 0}
    with pg_kernel.engine.connect() as conn:
        for _ in range(3):
            assert st.OCCURRENCE_FOR_CLAIM.first(conn, params) is None
        for _ in range(6):
            conn.execute(sa.text("SELECT count(*) FROM occurrences")).scalar_one()
        conn.rollback()
        assert st.OCCURRENCE_FOR_CLAIM.first(conn, params) is None


def test_a_statement_is_converted_to_numbered_placeholders_once() -> None:
    query = _query(
        "SELECT %(b)s, %(a)s FROM t WHERE k LIKE 'enqueue:%%' AND x = %(b)s AND y = %(c)s"
    )
    assert query.text == b"SELECT $1, $2 FROM t WHERE k LIKE 'enqueue:%' AND x = $1 AND y = $3"
    assert query.values({"a": 1, "b": 2, "c": 3}) == (2, 1, 3)
    assert _query("SELECT %(only)s").values({"only": 5}) == (5,)


def test_a_caller_who_sets_psycopgs_threshold_gets_psycopgs_prepares(pg_database_url: str) -> None:
    # Where psycopg prepares statements itself (its DEALLOCATE ALL on rollback would drop
    # the kernel's), every statement goes through its cursor.
    Kernel.open(pg_database_url, migrate_schema=True).close()
    engine = create_kernel_engine(pg_database_url, connect_args={"prepare_threshold": 1})
    params = {"occurrence_id": 1, "now": 0}
    try:
        with engine.connect() as conn:
            for _ in range(3):
                assert st.OCCURRENCE_FOR_CLAIM.first(conn, params) is None
            names = conn.execute(sa.text("SELECT name FROM pg_prepared_statements")).scalars()
            assert [name for name in names if name.startswith("kernel_")] == []
    finally:
        engine.dispose()


def test_a_callers_connection_keeps_no_statement_of_the_kernels(pg_kernel: Kernel) -> None:
    # A connection the kernel borrows (enqueue(connection=...)) is the caller's session:
    # the kernel's statements go through its cursor there, unprepared, even where the
    # caller turned psycopg's prepares off and the same statement runs twice in a call.
    url = pg_kernel.engine.url.set(drivername="postgresql")
    dsn = url.render_as_string(hide_password=False)
    with psycopg.connect(dsn, prepare_threshold=None) as conn:
        for _ in range(3):
            with conn.transaction():
                pg_kernel.enqueue_many(
                    [
                        EnqueueRequest(task=f"prepared.borrowed{n}", args=[n], key=f"k{n}")
                        for n in range(4)
                    ],
                    connection=conn,
                )
        names = [row[0] for row in conn.execute("SELECT name FROM pg_prepared_statements")]
    assert names == []
    assert pg_kernel.status()["counts"]["queued"] == 4
