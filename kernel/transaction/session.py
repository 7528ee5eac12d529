"""Transactions: the held connection, the SQLite writer gate, and where errors are translated."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import sqlalchemy as sa

from kernel.db.clock import Clock
from kernel.db.driver import send
from kernel.db.engine import begin_write, end_write
from kernel.db.process_id import current_pid
from kernel.db.translate import Phase, connection_lost, translate
from kernel.db.writer_gate import KeptWal, WriterGate, sync_wal
from kernel.errors import KernelError, StorageUnavailable
from kernel.transaction.tx import Tx

__all__ = ["Session"]

R = TypeVar("R")
_FULL = 2  # PRAGMA synchronous's answer for FULL


class _Held:
    """The connection a Kernel keeps for its writes, in the process that opened it.

    A worker claims and settles back to back; a pool checkout per call (and on
    PostgreSQL its pre-ping round trip) would cost more than the statements.
    Whoever holds ``lock`` may use ``conn``; a thread that finds it taken (a
    heartbeat during a settle) checks a connection out of the pool instead.
    """

    __slots__ = ("pid", "lock", "conn", "full", "normal", "wal")

    def __init__(self) -> None:
        self.pid = current_pid()
        self.lock = threading.Lock()
        self.conn: sa.Connection | None = None
        #: SQLite: the engine asks for synchronous=FULL (read once per connection).
        self.full = False
        #: SQLite: the connection is switched to NORMAL, its WAL synced after the gate.
        self.normal = False
        #: SQLite: the WAL's descriptor for the syncs after ``conn``'s commits.
        self.wal = KeptWal()


class Session:
    """Runs a function as one transaction, with its ``Tx``, and translates what fails."""

    def __init__(self, engine: sa.Engine, clock: Clock) -> None:
        self.engine = engine
        self.clock = clock
        self.dialect = engine.dialect.name
        self._postgres = self.dialect == "postgresql"
        self._held = _Held()
        database = engine.url.database if self.dialect == "sqlite" else None
        self._gate = (
            WriterGate(database, timeout_s=5.0)
            if database and database != ":memory:" and not database.startswith("file:")
            else None
        )

    def close(self) -> None:
        held = self._held
        if held.pid == current_pid():
            with held.lock:
                self._release(held)
        if self._gate is not None:
            self._gate.close()

    def run(self, fn: Callable[..., R], *args: Any, read_only: bool = False, **kwargs: Any) -> R:
        held = self._held
        if held.pid != current_pid():
            # Forked (Celery prefork): the parent's connection is not ours to use or close.
            held = self._held = _Held()
        if read_only or not held.lock.acquire(blocking=False):
            return self._transact(None, fn, args, kwargs, read_only)
        try:
            if self._postgres and held.conn is not None:
                # No writer gate and no WAL to sync: straight to the attempt (two a run).
                return self._attempt(held, fn, args, kwargs, False, False, [])
            return self._transact(held, fn, args, kwargs, False)
        finally:
            held.lock.release()

    def now_ms(self) -> int:
        """The clock's reading, outside any transaction of ours."""
        try:
            with self.engine.connect() as conn:
                return self.clock.now_ms(conn)
        except (sa.exc.DBAPIError, OSError) as exc:
            raise translate(exc, phase="open", url=self.engine.url, dialect=self.dialect) from exc

    def _transact(
        self,
        held: _Held | None,
        fn: Callable[..., R],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        read_only: bool,
    ) -> R:
        """One transaction on the held connection (``held``) or a pooled one (None).

        On SQLite under ``synchronous=FULL`` the held connection commits while holding the
        gate without SQLite's sync, and the WAL is synced after the gate is released,
        before this returns: the fsync, most of a short transaction's time, no longer
        holds the other writers back (bench/README.md, session 22), and the caller's commit
        is as durable as FULL's when it returns. Others may see the commit during that
        sync: a read syncs the WAL itself when a commit may be unsynced.
        """
        gated = not read_only and self._gate is not None and self._gate.acquire()
        unsynced: list[int] = []
        try:
            result = self._attempt(held, fn, args, kwargs, read_only, gated, unsynced)
        finally:
            if gated:
                self._gate.release()  # type: ignore[union-attr]
        if unsynced:
            assert held is not None and held.conn is not None  # only the held one skips the sync
            self._sync(unsynced[0], held.wal, held.conn.connection.dbapi_connection)
        return result

    def _attempt(
        self,
        held: _Held | None,
        fn: Callable[..., R],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        read_only: bool,
        gated: bool,
        unsynced: list[int],
    ) -> R:
        phase: list[Phase] = ["open"]  # how far it got, for the error's commit state
        try:
            if held is not None and held.conn is not None and self._postgres:
                # The held PostgreSQL connection, open: nothing to open, no sync mode, and
                # nothing to begin (psycopg begins with the first statement). Two a run.
                conn = held.conn
                tx = Tx(conn, self.clock, self.dialect, own=True)
                return self._write(conn, tx, fn, args, kwargs, phase, False, unsynced)
            with self._connection(held, read_only) as conn:
                tx = Tx(conn, self.clock, self.dialect, own=not read_only)
                if read_only:
                    with conn.begin() as trans:
                        phase[0] = "write"
                        result = fn(tx, *args, **kwargs)
                        phase[0] = "commit"
                        trans.commit()
                    self._sync_seen()
                    return result
                fast = held is not None and self._sync_mode(held, conn, gated)
                begin_write(conn)
                return self._write(conn, tx, fn, args, kwargs, phase, fast, unsynced)
        except KernelError:
            raise
        except (sa.exc.DBAPIError, OSError) as exc:
            if held is not None:
                self._release(held)
                if phase[0] != "commit" and connection_lost(exc):
                    # Typically the held connection died while idle (a server restart),
                    # which the pool's pre-ping catches for a checkout. COMMIT was not
                    # sent, so nothing of this call persisted: run it once on a pooled one.
                    return self._transact(None, fn, args, kwargs, read_only)
            raise translate(exc, phase=phase[0], url=self.engine.url, dialect=self.dialect) from exc
        except BaseException:
            if held is not None:
                self._release(held)
            raise

    def _write(
        self,
        conn: sa.Connection,
        tx: Tx,
        fn: Callable[..., R],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        phase: list[Phase],
        fast: bool,
        unsynced: list[int],
    ) -> R:
        """``fn``'s write transaction on ``conn`` (begun), committed, or rolled back on any
        error; ``phase[0]`` says whether COMMIT was sent. ``fast``: committed without SQLite's
        sync, its commit number left in ``unsynced`` for the caller's sync."""
        phase[0] = "write"
        try:
            result = fn(tx, *args, **kwargs)
            phase[0] = "commit"
            number = self._gate.commit_begins() if fast else 0  # type: ignore[union-attr]
            end_write(conn, commit=True)  # sends nothing after a statement sent alone
            if fast:
                self._gate.commit_written(number)  # type: ignore[union-attr]
                unsynced.append(number)
        except BaseException:
            with contextlib.suppress(sa.exc.DBAPIError):  # the first error is the one
                end_write(conn, commit=False)
            raise
        return result

    def _sync_mode(self, held: _Held, conn: sa.Connection, gated: bool) -> bool:
        """Put the held connection at NORMAL when its engine asks for FULL and the gate is
        held, at FULL otherwise (a write without the gate keeps no commit numbers: SQLite
        syncs it); sent before BEGIN, as SQLite refuses it inside a transaction. True: it
        commits without SQLite's sync."""
        fast = held.full and gated
        if held.normal != fast:
            send(conn, f"PRAGMA synchronous = {'NORMAL' if fast else 'FULL'}", (), fetch=False)
            held.normal = fast
        return fast

    def _sync(self, number: int, kept: KeptWal, owner: object) -> None:
        """Sync the WAL after a commit of ``owner`` made without SQLite's sync, before the
        caller goes on."""
        gate = self._gate
        assert gate is not None
        try:
            kept.sync(gate.database_path, owner)
        except OSError as exc:
            raise StorageUnavailable(
                "the transaction committed but the disk did not confirm it "
                f"({exc.strerror or exc}): it may be lost if the machine stops; "
                "check the disk holding the database",
                commit_state="unknown",
            ) from exc
        gate.synced(number)

    def _sync_seen(self) -> None:
        """After a read: sync the WAL if a commit it may have seen is not on disk yet."""
        gate = self._gate
        if gate is None:
            return
        written = gate.unsynced()
        if written is not None:
            sync_wal(gate.database_path)
            gate.synced(written)

    def _connection(
        self, held: _Held | None, read_only: bool
    ) -> contextlib.AbstractContextManager[sa.Connection]:
        if held is None:
            conn = self.engine.connect()
            if read_only:
                conn.execution_options(kernel_read_only=True)
            return conn
        if held.conn is None:
            held.conn = self.engine.connect()
            if self._gate is not None:
                mode = send(held.conn, "PRAGMA synchronous", (), fetch=True)[0][0][0]
                held.full, held.normal = mode == _FULL, False
        return contextlib.nullcontext(held.conn)

    @staticmethod
    def _release(held: _Held) -> None:
        """Give the held connection back (the caller holds ``held.lock``)."""
        conn, held.conn = held.conn, None
        held.wal.close()
        if conn is not None:
            if held.normal:  # back to the pool as the engine made it, or not at all
                held.normal = False
                try:
                    send(conn, "PRAGMA synchronous = FULL", (), fetch=False)
                except sa.exc.DBAPIError:
                    conn.invalidate()
            conn.close()
