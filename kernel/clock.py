"""Where "now" comes from. Lease times must come from one clock (SPEC I9)."""

from __future__ import annotations

import time
from typing import Protocol

import sqlalchemy as sa

from kernel.driver import DriverStatement

__all__ = ["Clock", "SystemClock", "DatabaseClock", "default_clock"]


class Clock(Protocol):
    """Gives the current time in epoch milliseconds, inside a transaction."""

    def now_ms(self, conn: sa.Connection) -> int: ...


class SystemClock:
    """This host's clock: right for SQLite, where every writer shares the host."""

    def now_ms(self, conn: sa.Connection) -> int:
        return time.time_ns() // 1_000_000


class DatabaseClock:
    """The PostgreSQL server's clock, so host clock skew cannot steal or stretch a lease."""

    # Read at the start of every transaction: on the driver (kernel/driver.py).
    _ms = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint"
    _query = DriverStatement(sa.select(sa.literal_column(_ms, sa.BigInteger)))

    def now_ms(self, conn: sa.Connection) -> int:
        row = self._query.first(conn)
        assert row is not None
        return int(row[0])


def default_clock(dialect_name: str) -> Clock:
    return DatabaseClock() if dialect_name == "postgresql" else SystemClock()
