"""Where "now" comes from. Lease times must come from one clock (SPEC I9)."""

from __future__ import annotations

import time
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler

from kernel.db.driver import DriverStatement

__all__ = ["Clock", "SystemClock", "DatabaseClock", "StatementNow", "default_clock"]


class Clock(Protocol):
    """Gives the current time in epoch milliseconds, inside a transaction."""

    def now_ms(self, conn: sa.Connection) -> int: ...


class SystemClock:
    """This host's clock: right for SQLite, where every writer shares the host."""

    def now_ms(self, conn: sa.Connection) -> int:
        return time.time_ns() // 1_000_000


#: The server's clock in epoch milliseconds (PostgreSQL).
_SERVER_MS = "(EXTRACT(EPOCH FROM {}) * 1000)::bigint"


class DatabaseClock:
    """The PostgreSQL server's clock, so host clock skew cannot steal or stretch a lease.

    The worker's hot statements read it themselves (:class:`StatementNow`); other
    transactions read it on their first use of ``Tx.now``, in its own round trip.
    """

    _query = DriverStatement(
        sa.select(sa.literal_column(_SERVER_MS.format("clock_timestamp()"), sa.BigInteger)),
        "postgresql",
    )

    def now_ms(self, conn: sa.Connection) -> int:
        row = self._query.first(conn)
        assert row is not None
        return int(row[0])


class StatementNow(sa.sql.expression.ColumnElement[int]):
    """The transaction's instant as a statement's ``:now``.

    On SQLite it is the ``now`` parameter. On PostgreSQL it is the parameter when
    given, else the server's clock as the statement arrived (``statement_timestamp()``,
    one value wherever it appears in the statement, unlike ``clock_timestamp()``): the
    first statement of a transaction reads the clock instead of a round trip of its own
    (``Tx.now_param`` / ``Tx.observe_now``).
    """

    type = sa.BigInteger()
    inherit_cache = False  # rendered once per dialect by DriverStatement

    def __init__(self) -> None:
        self.param = sa.bindparam("now", type_=sa.BigInteger)


@compiles(StatementNow)
def _now_as_parameter(element: StatementNow, compiler: SQLCompiler, **kw: Any) -> str:
    return compiler.process(element.param, **kw)


@compiles(StatementNow, "postgresql")
def _now_on_server(element: StatementNow, compiler: SQLCompiler, **kw: Any) -> str:
    param = compiler.process(element.param, **kw)
    return f"COALESCE(CAST({param} AS BIGINT), {_SERVER_MS.format('statement_timestamp()')})"


def default_clock(dialect_name: str) -> Clock:
    return DatabaseClock() if dialect_name == "postgresql" else SystemClock()
