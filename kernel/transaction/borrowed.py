"""A caller's open transaction, for a kernel write that must commit or roll back with it.

``enqueue(..., connection=...)`` inserts its occurrence in the application's own
transaction, so the occurrence exists exactly when the application's data does. The
connection is the caller's: the kernel runs its statements on it and never commits,
rolls back or closes it.

Accepted: a SQLAlchemy ``Connection`` in an open transaction, or a psycopg 3
connection, on the kernel's own database. On SQLite only a connection to the kernel's
own file is accepted (another database cannot hold the kernel's rows).
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql.psycopg import _log_notices

from kernel.db.clock import Clock
from kernel.db.driver import leave_unprepared
from kernel.db.translate import translate
from kernel.errors import InvalidArgument, KernelError
from kernel.transaction.tx import Tx

__all__ = ["Borrowed"]

R = TypeVar("R")
_FIELD = "connection"
#: Which server and database a PostgreSQL connection reaches.
_WHERE = sa.text("SELECT current_database(), inet_server_addr()::text, inet_server_port()")


def _leave_alone(driver_connection: Any) -> None:
    """What ending a caller's transaction or connection does here: nothing."""


class Borrowed:
    """Runs kernel functions in callers' transactions, for one kernel engine."""

    def __init__(self, engine: sa.Engine, clock: Clock) -> None:
        self.engine = engine
        self.clock = clock
        self._lock = threading.Lock()
        self._current = threading.local()
        self._wrapper: sa.Engine | None = None
        self._kernel_where: tuple[Any, ...] | None = None
        #: Driver connections already found to reach the kernel's database.
        self._checked: weakref.WeakSet[Any] = weakref.WeakSet()

    def run(self, connection: Any, fn: Callable[..., R], *args: Any) -> R:
        """``fn(tx, *args)`` on ``connection``'s transaction, never ending it.

        Raises:
            InvalidArgument: ``connection`` is not one the kernel can write through
                (field ``connection``); nothing is written.
            StorageUnavailable: the statement failed (the caller's transaction is then
                the caller's to roll back).
        """
        with self._connection(connection) as conn:
            try:
                return fn(Tx(conn, self.clock, conn.dialect.name), *args)
            except KernelError:
                raise
            except sa.exc.DBAPIError as exc:
                dialect = conn.dialect.name
                raise translate(exc, phase="write", url=self.engine.url, dialect=dialect) from exc

    @contextmanager
    def _connection(self, connection: Any) -> Iterator[sa.Connection]:
        dialect = self.engine.dialect.name
        if isinstance(connection, sa.Connection):
            if connection.dialect.name != dialect:
                raise InvalidArgument(
                    _FIELD, f"is a {connection.dialect.name} connection; the kernel is on {dialect}"
                )
            if not connection.in_transaction():
                raise InvalidArgument(
                    _FIELD, "has no open transaction: call inside `with connection.begin():`"
                )
            self._check_database(connection.connection.dbapi_connection, connection)
            yield connection
            return
        if type(connection).__module__.split(".")[0] != "psycopg":
            raise InvalidArgument(
                _FIELD,
                "must be a SQLAlchemy Connection or a psycopg 3 connection, not "
                f"{type(connection).__module__}.{type(connection).__name__}",
            )
        if dialect != "postgresql":
            raise InvalidArgument(
                _FIELD,
                "is a PostgreSQL connection; this kernel is on SQLite: enqueue without "
                "a connection, or put the kernel on your application's PostgreSQL",
            )
        if connection.closed:
            raise InvalidArgument(_FIELD, "is closed")
        if connection.autocommit and str(connection.info.transaction_status.name) == "IDLE":
            raise InvalidArgument(
                _FIELD,
                "is in autocommit mode outside a transaction: open one "
                "(`with connection.transaction():`, or Django's `transaction.atomic()`)",
            )
        self._current.raw = connection
        try:
            with self._wrapping_engine().connect() as conn:
                with contextlib.suppress(ValueError):  # no handler left behind per call
                    connection.remove_notice_handler(_log_notices)
                self._check_database(connection, conn)
                yield conn
        finally:
            self._current.raw = None

    def _wrapping_engine(self) -> sa.Engine:
        """An engine whose connection is the caller's (per call, by thread) and which
        never commits, rolls back or closes it, nor leaves a prepared statement in its
        session: those are the caller's."""
        with self._lock:
            if self._wrapper is None:
                wrapper = sa.create_engine(
                    self.engine.url, creator=lambda: self._current.raw, poolclass=sa.pool.NullPool
                )
                dialect: Any = wrapper.dialect
                dialect.do_commit = dialect.do_rollback = dialect.do_close = _leave_alone
                sa.event.listen(wrapper, "connect", lambda _dbapi, record: leave_unprepared(record))
                self._wrapper = wrapper
            return self._wrapper

    def _check_database(self, driver_connection: Any, conn: sa.Connection) -> None:
        """Refuse a connection to another database than the kernel's (on PostgreSQL
        asked once per driver connection)."""
        if conn.dialect.name == "sqlite":
            file = conn.engine.url.database or ":memory:"
            own = self.engine.url.database or ""
            if file == ":memory:" or os.path.realpath(file) != os.path.realpath(own):
                raise InvalidArgument(
                    _FIELD,
                    f"reaches SQLite database {file!r}, not the kernel's {own!r}: on "
                    "SQLite only the kernel's own database can hold its rows",
                )
            return
        if driver_connection in self._checked:
            return
        theirs_at = tuple(conn.execute(_WHERE).one())
        if self._kernel_where is None:
            with self.engine.connect() as kernels:
                self._kernel_where = tuple(kernels.execute(_WHERE).one())
        ours = self._kernel_where
        if theirs_at != ours:
            raise InvalidArgument(
                _FIELD,
                f"reaches database {theirs_at[0]!r} (server {theirs_at[1]}:{theirs_at[2]}), "
                f"not the kernel's {ours[0]!r} (server {ours[1]}:{ours[2]})",
            )
        self._checked.add(driver_connection)
