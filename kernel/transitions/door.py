"""The door of the transition table (:mod:`kernel.transitions.occurrences`): what a row is, and the
one way the kernel performs one. Running a row lets its events be appended in the
transaction (``Tx.emit`` refuses any other event a row lists)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from kernel.db.driver import DriverStatement
from kernel.events import EventType as E

if TYPE_CHECKING:
    from kernel.transaction.tx import Tx

__all__ = [
    "LOGGED_ON_POSTGRES",
    "Statement",
    "Transition",
    "append",
    "run",
    "run_all",
    "run_count",
    "run_many",
]

#: What performs a transition: a Core statement, a driver-run one, or one per dialect.
Statement = sa.Executable | DriverStatement | Mapping[str, sa.Executable | DriverStatement]


#: The hot path's rows write their events in their own statement on PostgreSQL.
LOGGED_ON_POSTGRES = ("postgresql",)


@dataclass(frozen=True, slots=True)
class Transition:
    from_states: tuple[str, ...]
    trigger: str
    to_states: tuple[str, ...]
    statement: Statement
    guard: str
    events: tuple[E, ...]
    #: The dialects whose form of ``statement`` writes the row's events itself (a
    #: data-modifying CTE); on the others :func:`append` writes them after it.
    logged_on: tuple[str, ...] = ()


def run(
    tx: Tx,
    transition: Transition | tuple[Transition, ...],
    params: Mapping[str, Any],
    *,
    alone: bool = False,
) -> sa.Row[Any] | None:
    """Perform ``transition``: run its statement; its first returned row, or None when
    its guard held for no row. Its events may be appended in this transaction from now.

    A tuple names the rows one statement decides between (they share it). ``alone``: the
    statement is the whole transaction when it returns a row (``Tx.first_alone``).
    """
    rows = transition if isinstance(transition, tuple) else (transition,)
    statement = rows[0].statement
    assert all(row.statement is statement for row in rows), "one statement per run"
    for row in rows:
        tx.allowed_events.update(row.events)
    if isinstance(statement, Mapping):
        statement = statement[tx.dialect]
    if isinstance(statement, DriverStatement):
        return tx.first_alone(statement, params) if alone else statement.first(tx.conn, params)
    assert not alone, "a statement sent alone runs on the driver"
    return tx.conn.execute(statement, params).first()


def run_all(tx: Tx, transition: Transition, params: Mapping[str, Any]) -> list[sa.Row[Any]]:
    """Perform a batch ``transition`` (a Core statement moving many rows): every row it
    returned. Its events may be appended in this transaction from now."""
    tx.allowed_events.update(transition.events)
    assert isinstance(transition.statement, sa.Executable), "a batch is one Core statement"
    return list(tx.conn.execute(transition.statement, params).all())


def run_count(tx: Tx, transition: Transition, params: Mapping[str, Any]) -> int:
    """Perform ``transition`` whose statement returns no rows (a counter moved, a row
    recorded): how many rows it changed. Its events may be appended from now."""
    tx.allowed_events.update(transition.events)
    statement = transition.statement
    if isinstance(statement, Mapping):
        statement = statement[tx.dialect]
    if isinstance(statement, DriverStatement):
        return statement.execute(tx.conn, params)
    return int(tx.conn.execute(statement, params).rowcount)


def run_many(tx: Tx, transition: Transition, param_sets: Sequence[Mapping[str, Any]]) -> None:
    """Perform ``transition`` once per parameter set, in one round trip (a Core statement
    that returns no rows, run as the driver's ``executemany``: no reliable count)."""
    tx.allowed_events.update(transition.events)
    statement = transition.statement
    if isinstance(statement, Mapping):
        statement = statement[tx.dialect]
    assert isinstance(statement, sa.Executable), "a batch is one Core statement"
    if param_sets:
        tx.conn.execute(statement, list(param_sets))


def append(
    tx: Tx,
    transition: Transition,
    type_: str,
    data: str | Mapping[str, Any],
    *,
    job_id: str | None,
    occurrence_id: int | None,
    fence: int | None,
) -> None:
    """Append ``transition``'s event ``type_`` unless its statement wrote it already on
    this dialect (``logged_on``): one call whichever back end, in the transaction that ran
    the row. ``data``: the event's data, or its canonical JSON (``records.dumps``) when the
    caller built that text for the statement too."""
    if tx.dialect in transition.logged_on:
        return
    if not isinstance(data, str):
        tx.emit(type_, job_id=job_id, occurrence_id=occurrence_id, fence=fence, **data)
    else:
        tx.emit_json(type_, data, job_id=job_id, occurrence_id=occurrence_id, fence=fence)
