"""What PostgreSQL itself counts of a timed run's statements: ``pg_stat_statements``.

When the server preloads the extension (``end_to_end.py --pg-stat-statements`` starts
it so), each kernel run resets the counters before it and reads them after: calls and
executor time per statement, divided by the runs. The bench's own statements in that
window (``dispatch_batch``, the final ``status()`` polls) are counted too; the table
shows them, and they are few per run.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from bench.support import servers

__all__ = ["PRELOAD", "StatementCost", "StatementStats"]

#: Server settings that load the extension and count BEGIN/COMMIT too.
PRELOAD = {
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track_utility": "on",
}


@dataclass(frozen=True)
class StatementCost:
    query: str
    calls: int
    exec_ms: float


class StatementStats:
    """``pg_stat_statements`` of the database at ``url``; ``enabled`` is False when the
    server does not preload it (then ``read`` gives nothing)."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(servers().libpq_url(url), autocommit=True)
        row = self.conn.execute("SHOW shared_preload_libraries").fetchone()
        self.enabled = row is not None and "pg_stat_statements" in row[0]
        if self.enabled:
            self.conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")

    def reset(self) -> None:
        if self.enabled:
            self.conn.execute("SELECT pg_stat_statements_reset()")

    def read(self) -> list[StatementCost]:
        """This database's statements since the last reset, most executor time first."""
        if not self.enabled:
            return []
        rows = self.conn.execute(
            "SELECT query, calls, total_exec_time FROM pg_stat_statements "
            "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND query NOT LIKE '%pg_stat_statements%' ORDER BY total_exec_time DESC"
        ).fetchall()
        return [StatementCost(" ".join(q.split()), calls, ms) for q, calls, ms in rows]

    def close(self) -> None:
        self.conn.close()
