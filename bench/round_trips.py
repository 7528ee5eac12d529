"""Statements the kernel sends per claim and per settle, counted on the driver.

A count, not a timing: the same on a busy and a quiet machine, so it says where
a pair's round trips go (bench/README.md, "Where the time goes"). Per back end, a
fresh database with queued occurrences of one job (as bench/kernel_throughput.py
makes them), then ``Kernel.claim`` + ``Kernel.succeed`` per occurrence and one batch's
``Kernel.succeed_and_claim`` (a run's success and the next run's claim), counting
what reaches the driver: on SQLite every statement sqlite3 runs (its trace
callback, BEGIN and COMMIT included); on PostgreSQL every statement psycopg sends
through a cursor or the kernel sends as the connection's prepared statement
(kernel/db/prepared.py), plus the transaction's BEGIN (sent before the first
statement, one round trip) and its COMMIT, neither of which a statement sent alone
(autocommit) has.

    .venv/bin/python bench/round_trips.py
    .venv/bin/python bench/round_trips.py --backends postgres --postgres-url URL
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.kernel_throughput import BUSY_TIMEOUT_MS, _prepare  # noqa: E402
from bench.support import fresh_database, server  # noqa: E402
from kernel import Kernel  # noqa: E402
from kernel.db.prepared import PreparedStatements  # noqa: E402

BACKENDS = ("sqlite", "postgres")


class _Counter:
    """Statements seen on every connection the kernel opens from now on."""

    def __init__(self) -> None:
        self.statements: list[str] = []
        sa.event.listen(sa.Engine, "connect", self._connected)
        sa.event.listen(sa.Engine, "commit", self._committed)
        self._prepared_execute = original = PreparedStatements.execute
        statements = self.statements

        def execute(prepared: Any, sql: str, args: Any, *, fetch: bool) -> Any:
            dbapi = prepared._dbapi
            begins = not dbapi.info.transaction_status and not dbapi.autocommit
            answer = original(prepared, sql, args, fetch=fetch)
            if answer is not None:  # None: the cursor runs it (counted there)
                statements.extend(["BEGIN", sql] if begins else [sql])
            return answer

        PreparedStatements.execute = execute  # type: ignore[method-assign]

    def close(self) -> None:
        sa.event.remove(sa.Engine, "connect", self._connected)
        sa.event.remove(sa.Engine, "commit", self._committed)
        PreparedStatements.execute = self._prepared_execute  # type: ignore[method-assign]

    def _connected(self, dbapi_conn: Any, _record: Any) -> None:
        if hasattr(dbapi_conn, "set_trace_callback"):  # sqlite3: BEGIN/COMMIT included
            dbapi_conn.set_trace_callback(lambda statement: self.statements.append(statement))
            return
        counter = self

        base = dbapi_conn.cursor_factory

        class Counting(base):  # type: ignore[misc, valid-type]
            def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
                # Idle outside autocommit: psycopg sends BEGIN first (a statement the
                # kernel sends alone goes in autocommit, its own transaction).
                if not dbapi_conn.info.transaction_status and not dbapi_conn.autocommit:
                    counter.statements.append("BEGIN")
                counter.statements.append(str(query))
                return super().execute(query, *args, **kwargs)

        dbapi_conn.cursor_factory = Counting

    def _committed(self, conn: sa.Connection) -> None:
        # psycopg sends COMMIT only for a transaction under way (not after one sent alone).
        dbapi_conn: Any = conn.connection.dbapi_connection
        if conn.dialect.name == "postgresql" and dbapi_conn.info.transaction_status:
            self.statements.append("COMMIT")

    def take(self) -> list[str]:
        taken = list(self.statements)
        self.statements.clear()  # the list the prepared statements' hook appends to
        return taken


_WRITES = ("UPDATE", "INSERT", "DELETE")


def _verb(statement: str) -> str:
    words = statement.split()
    head = words[0].upper() if words else "?"
    if head == "WITH":
        verbs = [w.strip("(").upper() for w in words if w.strip("(").upper() in _WRITES]
        return "WITH " + "+".join(verbs)
    if head in _WRITES:
        table = words[1] if head == "UPDATE" else words[2] if len(words) > 2 else ""
        return f"{head} {table}"
    if head == "SELECT" and "clock_timestamp" in statement and "occurrences" not in statement:
        return "SELECT clock"
    if head == "SELECT" and "FROM occurrences" in statement:
        return "SELECT occurrence"
    return head


def _measure(url: str, n: int) -> dict[str, list[str]]:
    ids = _prepare(url, n, "FULL")
    counter = _Counter()
    kernel = Kernel.open(url, sqlite_synchronous="FULL", busy_timeout_ms=BUSY_TIMEOUT_MS)
    try:
        warm = ids[0]
        claim = kernel.claim(warm, owner="w", lease=30)
        assert claim is not None
        kernel.succeed(warm, owner="w", fence=claim.fence)
        counter.take()
        shapes: dict[str, list[str]] = {"claim": [], "settle": [], "batch": []}
        *singles, batched, following = ids[1:]
        for occ_id in singles:
            claim = kernel.claim(occ_id, owner="w", lease=30)
            assert claim is not None
            shapes["claim"] = [_verb(s) for s in counter.take()]
            kernel.succeed(occ_id, owner="w", fence=claim.fence)
            shapes["settle"] = [_verb(s) for s in counter.take()]
        # A batch's run: its success and the next run's claim (decision 2 of issue 22).
        claim = kernel.claim(batched, owner="w", lease=30)
        assert claim is not None
        counter.take()
        nxt = kernel.succeed_and_claim(
            batched, owner="w", fence=claim.fence, next_occurrence_id=following, lease=30
        )
        assert nxt is not None
        shapes["batch"] = [_verb(s) for s in counter.take()]
        return shapes
    finally:
        kernel.close()
        counter.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--postgres-url", help="use this server instead of starting one")
    args = parser.parse_args(argv)
    rows = []
    with ExitStack() as stack:
        for backend in args.backends:
            if backend == "postgres":
                server_url = stack.enter_context(server("postgres", args.postgres_url))
            else:
                server_url = None
            with fresh_database(server_url, "bench_trips") as url:
                shapes = _measure(url, 6)
            for step in ("claim", "settle", "batch"):
                rows.append(
                    f"{backend:<9} {step:<7} {len(shapes[step]):>2}  " + ", ".join(shapes[step])
                )
    print(
        f"{'backend':<9} {'call':<7} {'n':>2}  statements sent (one round trip each on PostgreSQL)"
    )
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
