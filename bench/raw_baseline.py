"""The raw baseline of bench/kernel_throughput.py: the kernel's claim and settle by hand.

Per call, the statements the kernel sends, written for the bare driver (sqlite3,
psycopg) on the kernel's schema, with the event JSON built the same way. Keep in
step with kernel/occurrences/claiming.py (``claim``), kernel/occurrences/runs.py (``settle``),
kernel/statements/claims.py and settles.py, and
kernel/transaction/tx.py (``Tx.emit``): the benchmark's ratio is only as honest as this mirror.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from typing import Any

from bench.support import servers
from kernel.records import OCCURRENCE_COLUMNS

__all__ = ["RawWorker"]

#: What the kernel's claim returns (kernel/statements/claims.py).
_NAMES = list(OCCURRENCE_COLUMNS)
_COLUMNS = ", ".join(f'"{name}"' for name in _NAMES)
_O_COLUMNS = ", ".join(f'o."{name}"' for name in _NAMES)
#: Where each column sits in a row the claim returns (then the transaction's instant).
_AT = {name: i for i, name in enumerate([*_NAMES, "now"])}
_SQL = {
    # The claim of a plainly queued occurrence, no read before it (kernel
    # CLAIM_QUEUED_BY_DIALECT); {lease} is the snapshot's lease when none is given.
    "claim": "UPDATE occurrences SET status = 'running', attempt = attempt + 1,"
    " fence = fence + 1, lease_owner = :owner,"
    " lease_expires_at = {now} + coalesce(:lease_ms, {lease}),"
    " updated_at = {now}, settled_at = NULL"
    " WHERE id = :occ_id AND status = 'queued' AND available_at <= {now}"
    " AND lease_owner IS NULL AND attempt < max_attempts AND cancel_requested IS {false}"
    " AND \"exclusive\" IS {false} AND delivery = 'at-least-once' AND pool IS NULL"
    " AND NOT EXISTS (SELECT * FROM controls WHERE controls.occurrence_id = occurrences.id)"
    # The disabled-job guard (kernel JOB_ALLOWS_CLAIM); {any} is LIKE's wildcard.
    " AND (trigger_key LIKE 'manual:{any}' OR trigger_key LIKE 'at:{any}'"
    " OR EXISTS (SELECT * FROM jobs WHERE jobs.id = occurrences.job_id AND jobs.enabled))"
    f" RETURNING {_COLUMNS}, {{now}} AS now",
    # PostgreSQL: the claim and its event in one statement, the event's canonical JSON
    # built around the attempt written.
    "claim_and_log": "WITH claimed AS ({claim}),"
    " logged AS (INSERT INTO events (at, type, job_id, occurrence_id, fence, data)"
    " SELECT now, 'occurrence_claimed', job_id, id, fence,"
    " '{\"attempt\":' || attempt::text || ',\"owner\":' || :owner_json"
    # 'null' apart: ":null" inside one literal would read as a placeholder
    " || ',\"previous_owner\":' || 'null' || ',\"previous_status\":\"queued\"}' FROM claimed)"
    f" SELECT {_COLUMNS}, now FROM claimed",
    # A plain success (kernel SUCCEED_PLAIN_BY_DIALECT): no open control, pool or chained
    # job; on PostgreSQL also the row unchanged since the statement's snapshot ({unchanged}).
    "succeed": "UPDATE occurrences SET status = 'succeeded', lease_owner = NULL,"
    " lease_expires_at = NULL, available_at = {now}, dispatched_at = NULL,"
    " last_error = NULL, result = :result_json, updated_at = {now}, settled_at = {now}"
    " WHERE id = :occ_id AND status = 'running' AND lease_owner = :owner"
    " AND fence = :held_fence AND lease_expires_at > {now} AND pool IS NULL"
    " AND NOT EXISTS (SELECT * FROM controls WHERE controls.occurrence_id = occurrences.id"
    " AND controls.state != 'terminal')"
    " AND NOT EXISTS (SELECT * FROM jobs WHERE jobs.after_job = occurrences.job_id){unchanged}"
    " RETURNING job_id, attempt, {now} AS now",
    # PostgreSQL: the success and its event in one statement.
    "succeed_and_log": "WITH settled AS ({succeed}),"
    " logged AS (INSERT INTO events (at, type, job_id, occurrence_id, fence, data)"
    " SELECT now, 'occurrence_succeeded', job_id, :occ_id, :held_fence,"
    " '{\"attempt\":' || attempt::text || '}' FROM settled)"
    " SELECT job_id, attempt, now FROM settled",
    "event": "INSERT INTO events (at, type, job_id, occurrence_id, fence, data)"
    " VALUES (:at, :type, :job_id, :occurrence_id, :fence, :data)",
}
#: The transaction's instant: the server's, read inside the statement (kernel StatementNow).
_PG_NOW = "(EXTRACT(EPOCH FROM statement_timestamp()) * 1000)::bigint"
_PG_SNAPSHOT_LEASE = (
    "CAST(FLOOR(CAST(CAST(definition AS JSON) ->> 'lease' AS DOUBLE PRECISION) * 1000) AS BIGINT)"
)
_SQLITE_SNAPSHOT_LEASE = "CAST(json_extract(definition, '$.lease') * 1000 AS INTEGER)"
_SQL["claim_and_log"] = _SQL["claim_and_log"].replace("{claim}", _SQL["claim"])
_SQL["succeed_and_log"] = _SQL["succeed_and_log"].replace("{succeed}", _SQL["succeed"])
_PG_UNCHANGED = (
    " AND occurrences.xmin = (SELECT as_read.xmin FROM occurrences AS as_read"
    " WHERE as_read.id = :occ_id)"
)


def _dumps(value: Any) -> str:
    """The kernel's canonical JSON (kernel/records.py ``dumps``)."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def _pg_sql(text: str) -> str:
    """``:name`` placeholders as psycopg's ``%(name)s`` (``::bigint`` casts stay)."""
    return re.sub(r"(?<![:\w]):(\w+)", r"%(\1)s", text)


class RawWorker:
    """One process's hand-written claim and settle on the bare driver.

    ``begin`` opens a transaction as the kernel's engine does and returns its clock;
    ``execute(name, params)`` runs one of the statements above.
    """

    def __init__(self, url: str, synchronous: str, busy_timeout_ms: int) -> None:
        self.postgres = url.startswith("postgresql")
        if self.postgres:
            import psycopg

            # Autocommit: a plain claim and a plain success are each one statement, sent
            # alone (kernel Tx.first_alone).
            self.conn: Any = psycopg.connect(servers().libpq_url(url), autocommit=True)
            self.sql = {
                name: _pg_sql(
                    text.replace("{false}", "false")
                    .replace("{any}", "%%")
                    .replace("{lease}", _PG_SNAPSHOT_LEASE)
                    .replace("{unchanged}", _PG_UNCHANGED)
                    .replace("{now}", _PG_NOW)
                )
                for name, text in _SQL.items()
            }
        else:
            path = url.removeprefix("sqlite:///")
            self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self.conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute(f"PRAGMA synchronous = {synchronous}")
            self.sql = {
                name: text.replace("{false}", "0")
                .replace("{any}", "%")
                .replace("{lease}", _SQLITE_SNAPSHOT_LEASE)
                .replace("{unchanged}", "")
                .replace("{now}", ":now")
                for name, text in _SQL.items()
            }

    def execute(self, name: str, params: dict[str, Any] | None = None) -> Any:
        return self.conn.execute(self.sql[name], params or {})

    def begin(self) -> int | None:
        """Open a transaction (SQLite) and return its clock; None on PostgreSQL, whose
        statements read the clock and go alone."""
        if self.postgres:
            return None
        self.conn.execute("BEGIN IMMEDIATE")
        return time.time_ns() // 1_000_000

    def commit(self) -> None:
        self.conn.execute("COMMIT")

    def claim(self, occ_id: int, owner: str, lease_ms: int) -> int:
        clock = self.begin()
        params = {
            "occ_id": occ_id,
            "now": clock,
            "owner": owner,
            "owner_json": _dumps(owner),
            "lease_ms": lease_ms,
        }
        row = self.execute("claim_and_log" if self.postgres else "claim", params).fetchone()
        if row is None:
            raise AssertionError(f"occurrence {occ_id} is not plainly claimable")
        if not self.postgres:
            data = {
                "owner": owner,
                "attempt": row[_AT["attempt"]],
                "previous_status": "queued",
                "previous_owner": None,
            }
            now = int(row[_AT["now"]])
            self._emit(
                now, "occurrence_claimed", row[_AT["job_id"]], occ_id, row[_AT["fence"]], data
            )
            self.commit()
        return int(row[_AT["fence"]])

    def succeed(self, occ_id: int, owner: str, fence: int) -> None:
        clock = self.begin()
        params = {
            "occ_id": occ_id,
            "owner": owner,
            "held_fence": fence,
            "now": clock,
            "result_json": _dumps(None),
        }
        row = self.execute("succeed_and_log" if self.postgres else "succeed", params).fetchone()
        if row is None:
            raise AssertionError(f"occurrence {occ_id}: lease lost, or a control or a child")
        if not self.postgres:
            self._emit(
                int(row[2]), "occurrence_succeeded", row[0], occ_id, fence, {"attempt": row[1]}
            )
            self.commit()

    def _emit(
        self, now: int, type_: str, job_id: str, occ_id: int, fence: int, data: dict[str, Any]
    ) -> None:
        """The event INSERT, as kernel/transaction/tx.py ``Tx.emit`` writes it."""
        params = {"at": now, "type": type_, "job_id": job_id, "occurrence_id": occ_id}
        self.execute("event", {**params, "fence": fence, "data": _dumps(data)})

    def close(self) -> None:
        self.conn.close()
