"""One kernel transaction: the connection, the instant it runs at, and its event log."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from kernel.driver import DriverStatement
from kernel.records import dumps
from kernel.schema import events
from kernel.transitions import TRANSITION_EVENTS

__all__ = ["Tx"]

# Every transition writes one: the hot path's statement, so it runs on the driver.
_EVENT_FIELDS = ("at", "type", "job_id", "occurrence_id", "fence", "data")
_INSERT_EVENT = DriverStatement(
    sa.insert(events).values({name: sa.bindparam(name) for name in _EVENT_FIELDS})
)


@dataclass(slots=True)
class Tx:
    """Everything a state change needs; every change writes its events through ``emit``."""

    conn: sa.Connection
    now: int
    dialect: str
    #: The events of the transitions this transaction ran (kernel.transitions.run).
    allowed_events: set[str] = field(default_factory=set)

    @property
    def is_postgres(self) -> bool:
        return self.dialect == "postgresql"

    def emit(
        self,
        type_: str,
        *,
        job_id: str | None = None,
        occurrence_id: int | None = None,
        fence: int | None = None,
        **data: Any,
    ) -> None:
        if type_ in TRANSITION_EVENTS and type_ not in self.allowed_events:
            # A programming error, not a refusal: a state change outside the table.
            raise AssertionError(f"{type_} appended without a transition that lists it")
        _INSERT_EVENT.execute(
            self.conn,
            {
                "at": self.now,
                "type": type_,
                "job_id": job_id,
                "occurrence_id": occurrence_id,
                "fence": fence,
                "data": dumps(data),
            },
        )

    def insert_or_ignore(self, table: sa.Table) -> Any:
        """INSERT ... ON CONFLICT DO NOTHING: unique keys, not Python, refuse duplicates."""
        dialect_insert = postgresql.insert if self.is_postgres else sqlite.insert
        return dialect_insert(table).on_conflict_do_nothing()
