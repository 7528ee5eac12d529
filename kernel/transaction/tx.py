"""One kernel transaction: the connection, the instant it runs at, and its event log."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa

from kernel.db.clock import Clock, DatabaseClock
from kernel.db.driver import DriverStatement, psycopg_idle, switch_autocommit
from kernel.events import EVENTS_OUTSIDE_THE_TABLE
from kernel.records import dumps
from kernel.statements.logged import INSERT_EVENT

__all__ = ["Tx"]

#: What a statement sent alone answers: its rows.
Rows = TypeVar("Rows", bound=Sequence[Any])


class Tx:
    """Everything a state change needs; every change writes its events through ``emit``.

    ``now`` is read from the clock once, on first use, and is the one instant of the
    whole transaction. A statement built with :class:`~kernel.db.clock.StatementNow` can
    read the database clock itself (``now_param`` is then None) and hand the reading
    back (``observe_now``): on PostgreSQL that saves the clock's own round trip.
    """

    __slots__ = (
        "conn",
        "dialect",
        "is_postgres",
        "allowed_events",
        "made_runs",
        "_clock",
        "_now",
        "_own",
    )

    def __init__(
        self, conn: sa.Connection, clock: Clock, dialect: str, *, own: bool = False
    ) -> None:
        self.conn = conn
        self.dialect = dialect
        #: Read by every statement of the hot path: an attribute, not a property's call.
        self.is_postgres = dialect == "postgresql"
        self._clock = clock
        self._now: int | None = None
        #: The session's own connection (not a caller's): a statement may commit alone.
        self._own = own
        #: The events of the transitions this transaction ran (kernel.transitions.door.run).
        self.allowed_events: set[str] = set()
        #: The runs a settle's links made in this transaction (kernel.occurrences.rows).
        self.made_runs: list[int] = []

    @property
    def now(self) -> int:
        if self._now is None:
            self._now = self._clock.now_ms(self.conn)
        return self._now

    def now_param(self) -> int | None:
        """``:now`` for a StatementNow statement: None lets the statement read the server."""
        if self._now is None and self.is_postgres and isinstance(self._clock, DatabaseClock):
            return None
        return self.now

    def first_alone(
        self, statement: DriverStatement, params: Mapping[str, Any]
    ) -> sa.Row[Any] | None:
        """The first row of :meth:`all_alone`, or None."""
        rows = self.all_alone(statement, params)
        return rows[0] if rows else None

    def all_alone(self, statement: DriverStatement, params: Mapping[str, Any]) -> list[sa.Row[Any]]:
        """``statement.all``, sent as a transaction of its own when it would open this one
        on PostgreSQL (:meth:`alone`)."""
        return self.alone(lambda: statement.all(self.conn, params))

    def alone(self, send: Callable[[], Rows]) -> Rows:
        """``send()`` (one statement, its rows), sent as a transaction of its own when it
        would open this one on PostgreSQL: one round trip instead of three (BEGIN, the
        statement, COMMIT).

        For a statement that decides and writes everything of its transition, events
        included. Rows mean it committed: what the caller runs after it is a transaction
        of its own. No row means it changed nothing, and the transaction goes on as any
        other. On SQLite, or once the transaction has begun, it is an ordinary statement.
        """
        if not (self._own and self.is_postgres):
            return send()
        driver: Any = self.conn.connection.dbapi_connection
        if not psycopg_idle(driver):
            return send()
        switch_autocommit(driver, True)
        try:
            return send()
        finally:
            # A lost connection is discarded (the session retries on a fresh one, which is
            # safe: the statement's guard refuses a second apply), not switched back.
            if psycopg_idle(driver):
                switch_autocommit(driver, False)

    def lock(self, statement: sa.Executable | DriverStatement, params: Mapping[str, Any]) -> None:
        """Run ``statement``, whose only work is a lock (a row's ``FOR UPDATE``, an advisory
        lock), where there is one to take: on PostgreSQL. SQLite's write transaction
        (``BEGIN IMMEDIATE``) already excludes every other writer."""
        if not self.is_postgres:
            return
        if isinstance(statement, DriverStatement):
            statement.first(self.conn, params)
        else:
            self.conn.execute(statement, params)

    def observe_now(self, reading: int) -> None:
        """The instant a StatementNow statement ran at (its ``now`` column)."""
        if self._now is None:
            self._now = int(reading)

    def emit(
        self,
        type_: str,
        *,
        job_id: str | None = None,
        occurrence_id: int | None = None,
        fence: int | None = None,
        **data: Any,
    ) -> None:
        self.emit_json(type_, dumps(data), job_id=job_id, occurrence_id=occurrence_id, fence=fence)

    def emit_json(
        self,
        type_: str,
        data: str,
        *,
        job_id: str | None = None,
        occurrence_id: int | None = None,
        fence: int | None = None,
    ) -> None:
        """``emit`` with its data already in canonical JSON (``records.dumps``), for a
        caller that built that text for a statement too."""
        self._check_event(type_)
        INSERT_EVENT.execute(
            self.conn,
            {
                "at": self.now,
                "type": type_,
                "job_id": job_id,
                "occurrence_id": occurrence_id,
                "fence": fence,
                "data": data,
            },
        )

    def _check_event(self, type_: str) -> None:
        """A programming error, not a refusal: an event no transition of this transaction
        lists and not one of :data:`~kernel.events.EVENTS_OUTSIDE_THE_TABLE`. That every
        event belongs to a row or to that list is tests/kernel/test_table_walk.py's check."""
        if type_ in self.allowed_events or type_ in EVENTS_OUTSIDE_THE_TABLE:
            return
        raise AssertionError(
            f"{type_} appended without a transition of this transaction that lists it"
        )
