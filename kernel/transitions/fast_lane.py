"""The door's lane for a plain run: its claim and its success, the two writes of nearly
every task.

A queued run that never held a lease, with nothing else to decide, is claimed by
WORKER_CLAIMS_QUEUED's one statement, and a success that owes nothing beyond its row and
event is WORKER_SUCCEEDS_PLAIN's: each guard decides everything in SQL, so nothing is
read first, and a guard that holds for no row sends the caller to the general path
(kernel/occurrences/claiming.py, runs.py), which reads once and decides or raises.
A batch's step on PostgreSQL, WORKER_SUCCEEDS_AND_CLAIMS_NEXT (that success and the next
run's plain claim in one statement), goes the same way. Each still lets its rows' events
be appended (``Tx.allowed_events``) and writes its event where its statement does not
(``Transition.logged_on``), as :mod:`kernel.transitions.door` does.

Their statements' SQL is the transitions' own, rendered once per process
(``DriverStatement.rendered``). What this lane leaves out, per run, is the general
path's wrapping, measured as the largest Python part of a run after the statements
(bench/README.md sessions 20 and 21): ``door.run`` and ``Tx.emit``'s dispatch, the
merging and processing of bind values for each statement, an ``sa.Row`` built per row
and read through its mapping, and on SQLite the event's data encoded from a dict. Here
the bind values are arranged once, the row is the driver's tuple read by position, and
the event's text (SQLite writes it after the statement, as PostgreSQL's statement does
in SQL) is the canonical JSON ``records.dumps`` writes, formatted directly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from kernel.db.driver import DriverStatement, send
from kernel.events import EventType
from kernel.records import dumps, occurrence_from_mapping
from kernel.statements.logged import INSERT_EVENT
from kernel.transaction.tx import Tx
from kernel.transitions import occurrences as T
from kernel.transitions.door import Transition
from kernel.types import Claim

__all__ = ["claim_queued", "succeed_and_claim_queued", "succeed_plain"]

_CLAIMED = EventType.OCCURRENCE_CLAIMED.value
_SUCCEEDED = EventType.OCCURRENCE_SUCCEEDED.value


def claim_queued(tx: Tx, occurrence_id: int, owner: str, lease_ms: int | None) -> Claim | None:
    """WORKER_CLAIMS_QUEUED, the first statement of its transaction (sent alone on
    PostgreSQL, its event included); None when its guard held for no row (nothing
    written: the caller reads and decides)."""
    tx.allowed_events.update(T.WORKER_CLAIMS_QUEUED.events)
    statement = _statement(tx, T.WORKER_CLAIMS_QUEUED)
    params = {
        "occurrence_id": occurrence_id,
        "now": tx.now_param(),
        "owner": owner,
        "lease_ms": lease_ms,
    }
    keys, values = _first(tx, statement, params, alone=True)
    if values is None:
        return None
    return _claimed(tx, dict(zip(keys, values, strict=True)), owner)


def succeed_and_claim_queued(
    tx: Tx, params: Mapping[str, Any], owner: str
) -> tuple[bool, Claim | None]:
    """WORKER_SUCCEEDS_AND_CLAIMS_NEXT (PostgreSQL: one statement sent alone, both events
    included) with ``params`` (``runs.succeed_plain_params``, ``next_id``, ``lease_ms``):
    whether the run settled (False: nothing written, the caller reads and decides), and
    the next run's Claim where its guard held too."""
    transition = T.WORKER_SUCCEEDS_AND_CLAIMS_NEXT
    tx.allowed_events.update(transition.events)
    keys, values = _first(tx, _statement(tx, transition), params, alone=True)
    if values is None:
        return False, None
    m = dict(zip(keys, values, strict=True))
    return True, (None if m["id"] is None else _claimed(tx, m, owner))


def _claimed(tx: Tx, m: dict[str, Any], owner: str) -> Claim:
    """The Claim of the row WORKER_CLAIMS_QUEUED's guard let through (its columns by
    name), and its event where the statement did not write it (SQLite)."""
    tx.observe_now(m["now"])
    fence = m["fence"]
    if _logs_after(tx, T.WORKER_CLAIMS_QUEUED):
        data = (
            f'{{"attempt":{m["attempt"]},"owner":{dumps(owner)},'
            '"previous_owner":null,"previous_status":"queued"}'
        )
        _log(tx, _CLAIMED, m["job_id"], m["id"], fence, data)
    occurrence = occurrence_from_mapping(m)
    return Claim(
        occurrence=occurrence,
        owner=owner,
        fence=fence,
        lease_expires_at=occurrence.lease_expires_at,  # type: ignore[arg-type]
        resumed=False,
        checkpoint=None,
    )


def succeed_plain(tx: Tx, params: Mapping[str, Any], *, alone: bool) -> bool:
    """WORKER_SUCCEEDS_PLAIN with ``params`` (``runs.succeed_plain_params``); False
    (nothing written) when its guard held for no row, a lost lease included. ``alone``:
    the statement may be the whole transaction (PostgreSQL, its event included)."""
    tx.allowed_events.update(T.WORKER_SUCCEEDS_PLAIN.events)
    statement = _statement(tx, T.WORKER_SUCCEEDS_PLAIN)
    _keys, values = _first(tx, statement, params, alone=alone)
    if values is None:
        return False
    job_id, attempt, now = values  # RETURNING job_id, attempt, now
    tx.observe_now(now)
    if _logs_after(tx, T.WORKER_SUCCEEDS_PLAIN):
        data = f'{{"attempt":{attempt}}}'
        _log(tx, _SUCCEEDED, job_id, params["occurrence_id"], params["held_fence"], data)
    return True


def _statement(tx: Tx, transition: Transition) -> DriverStatement:
    """The row's statement on this back end (a driver statement, or one by dialect)."""
    statement = transition.statement
    if isinstance(statement, DriverStatement):  # a class of ours: no ABC check, twice a run
        return statement
    return cast(Mapping[str, DriverStatement], statement)[tx.dialect]


def _first(
    tx: Tx, statement: DriverStatement, params: Mapping[str, Any], *, alone: bool
) -> tuple[tuple[str, ...], Sequence[Any] | None]:
    """The statement's column names and its first row as the driver gave it (None: no row).

    Its binds need no processing (checked when first rendered: tests/kernel/
    test_hot_path_statements.py), so they are only put in the driver's order."""
    r = statement.rendered(tx.conn.dialect)
    args = r.arrange({**r.defaults, **params})

    def run() -> Sequence[Any]:
        return send(tx.conn, r.sql, args, fetch=True)[0]

    rows = tx.alone(run) if alone else run()
    return r.keys, (rows[0] if rows else None)


def _logs_after(tx: Tx, transition: Transition) -> bool:
    """The row's statement does not write its event on this back end (SQLite)."""
    return tx.dialect not in transition.logged_on


def _log(tx: Tx, type_: str, job_id: str, occurrence_id: int, fence: int, data: str) -> None:
    """The transition's event row (SQLite), at the instant its statement ran at."""
    r = INSERT_EVENT.rendered(tx.conn.dialect)
    row = {"at": tx.now, "type": type_, "job_id": job_id, "occurrence_id": occurrence_id}
    send(tx.conn, r.sql, r.arrange({**row, "fence": fence, "data": data}), fetch=False)
