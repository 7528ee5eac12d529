"""The event log's INSERTs, in one place: the one shape of an event row that a statement
writes itself (on PostgreSQL, as a data-modifying CTE: a transition and its events in one
round trip), and the rows ``Tx.emit`` appends from Python where a statement cannot
(SQLite), one (on the driver: every transition writes one) or many at a time."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from kernel.db.driver import DriverStatement
from kernel.db.schema import events

__all__ = ["INSERT_EVENT", "logged"]

_EVENT_COLUMNS = ["at", "type", "job_id", "occurrence_id", "fence", "data"]

#: One event row from its bound columns, on the driver.
INSERT_EVENT = DriverStatement(
    sa.insert(events).values({name: sa.bindparam(name) for name in _EVENT_COLUMNS})
)


def logged(
    at: Any,
    type_: Any,
    job_id: Any,
    occurrence_id: Any,
    fence: Any,
    data: Any,
    *,
    where: Any = None,
) -> sa.Insert:
    """An INSERT of one event per row its columns select (``where`` filters them);
    ``data`` is canonical JSON text, as ``records.dumps`` writes it."""
    select = sa.select(at, type_, job_id, occurrence_id, fence, data)
    if where is not None:
        select = select.where(where)
    return sa.insert(events).from_select(_EVENT_COLUMNS, select)
