"""The watchdog: what should have happened and did not, found from the durable record.

* overdue firings: an enabled, planned job whose fire cursor is more than ``grace``
  in the past (no Beat materialised it);
* runs past their timeout: running occurrences whose current claim is older than the
  timeout their worker applies plus ``grace`` (the worker should have stopped them): the
  job's ``timeout``, else the workers' default (``kernel_default_timeout``, handed in by
  the caller from the same settings);
* stranded occurrences: claimable for more than ``grace`` (no blocker holds them:
  kernel.upkeep.blockers), yet no claim took them — a defect, or no worker;
* the adjudication backlog: occurrences waiting for an operator's verdict;
* failing watchdog jobs: those whose latest check failed (:mod:`kernel.upkeep.watchdog_jobs`).

:func:`findings` only reads. :func:`record_findings` (Beat, periodically) appends one
event per finding it has not recorded before — ``watchdog_overdue`` once per job and
cursor, ``watchdog_overrun`` once per occurrence and fence, ``watchdog_stranded`` once
per occurrence and fence — so a stuck state is reported once, not every tick. A run's
finding is notified with its event, when its job's ``notify.on`` names ``watchdog`` (or
``stranded``, for that finding). Every Beat records: on PostgreSQL the recorders take
turns under one transaction-scoped advisory lock, so two Beats at the same instant do
not both find a finding new (SQLite's ``BEGIN IMMEDIATE`` already serialises them).
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from kernel.db.engine import ADVISORY_XACT_LOCK
from kernel.db.schema import events, jobs, occurrences
from kernel.events import EventType
from kernel.records import loads
from kernel.statements.predicates import status_is
from kernel.states import OccurrenceStatus
from kernel.transaction.tx import Tx
from kernel.transitions import notices
from kernel.upkeep.blockers import stranded
from kernel.upkeep.watchdog_jobs import failing_watchdogs

__all__ = ["MAX_FINDINGS", "findings", "record_findings"]

S = OccurrenceStatus
OCC = occurrences
#: Findings listed per kind at most (the counts are exact).
MAX_FINDINGS = 100
#: The advisory lock key watchdog recorders take on PostgreSQL ("WDOG").
_RECORDING_LOCK = 0x57444F47
#: A run's finding event, by the name its notification carries (``notify.on``).
_FINDINGS = {EventType.WATCHDOG_OVERRUN: "overrun", EventType.WATCHDOG_STRANDED: "stranded"}


def _overdue(tx: Tx, grace_ms: int) -> tuple[int, list[dict[str, Any]]]:
    late = sa.and_(jobs.c.enabled, jobs.c.planned, jobs.c.next_fire_at < tx.now - grace_ms)
    count = tx.conn.execute(sa.select(sa.func.count()).where(late)).scalar_one()
    rows = tx.conn.execute(
        sa.select(jobs.c.id, jobs.c.next_trigger_key, jobs.c.next_fire_at)
        .where(late)
        .order_by(jobs.c.next_fire_at)
        .limit(MAX_FINDINGS)
    ).all()
    return count, [
        {"job_id": r.id, "trigger_key": r.next_trigger_key, "late_ms": tx.now - r.next_fire_at}
        for r in rows
    ]


def _overrunning(tx: Tx, grace_ms: int, default_ms: int | None) -> list[dict[str, Any]]:
    """Running occurrences with a timeout (their own, else ``default_ms``) whose current
    claim began too long ago."""
    claimed_at = (
        sa.select(sa.func.max(events.c.at))
        .where(
            events.c.occurrence_id == OCC.c.id,
            events.c.fence == OCC.c.fence,
            events.c.type == EventType.OCCURRENCE_CLAIMED,
        )
        .scalar_subquery()
    )
    query = (
        sa.select(OCC.c.id, OCC.c.job_id, OCC.c.fence, OCC.c.definition, claimed_at.label("at"))
        .where(status_is(S.RUNNING))
        # By lease expiry: a walk of occurrences_running, where ordering by id walked every
        # row of history on SQLite.
        .order_by(OCC.c.lease_expires_at, OCC.c.id)
        .limit(10 * MAX_FINDINGS)
    )
    rows = tx.conn.execute(query).all()
    found = []
    for r in rows:
        own = loads(r.definition).get("timeout")
        timeout_ms = default_ms if own is None else int(own * 1000)
        if timeout_ms is None or r.at is None:
            continue
        over = tx.now - r.at - timeout_ms
        if over > grace_ms:
            found.append(
                {"occurrence_id": r.id, "job_id": r.job_id, "fence": r.fence, "over_ms": over}
            )
    return found[:MAX_FINDINGS]


def findings(tx: Tx, grace_ms: int, default_timeout_ms: int | None = None) -> dict[str, Any]:
    """Overdue firings, runs past their timeout (``default_timeout_ms`` for a job that
    sets none), the adjudication backlog and failing watchdog jobs, now."""
    overdue_count, overdue = _overdue(tx, grace_ms)
    backlog_query = sa.select(sa.func.count(), sa.func.min(OCC.c.updated_at)).where(
        status_is(S.NEEDS_ADJUDICATION)
    )
    backlog = tx.conn.execute(backlog_query).one()
    return {
        "grace_ms": grace_ms,
        "overdue_firings": overdue_count,
        "overdue": overdue,
        "overrunning": _overrunning(tx, grace_ms, default_timeout_ms),
        "stranded": stranded(tx, grace_ms, MAX_FINDINGS),
        "needs_adjudication": backlog[0],
        "oldest_adjudication_age_ms": None if backlog[1] is None else tx.now - backlog[1],
        "failing_watchdogs": failing_watchdogs(tx, MAX_FINDINGS),
    }


def _recorded(tx: Tx, type_: str, *where: Any) -> bool:
    query = sa.select(events.c.id).where(events.c.type == type_, *where).limit(1)
    return tx.conn.execute(query).first() is not None


def _record_once(tx: Tx, type_: str, where: tuple[Any, ...], **data: Any) -> int:
    """Append ``type_`` unless an event of it matching ``where`` is recorded; 1 if appended."""
    if _recorded(tx, type_, *where):
        return 0
    tx.emit(type_, **data)
    return 1


def _holds(key: str, value: str) -> Any:
    """``events.data`` (canonical JSON) holds ``"key":value`` exactly."""
    quoted = f'"{key}":' + json.dumps(value, ensure_ascii=False)
    escaped = quoted.replace("/", "//").replace("%", "/%").replace("_", "/_")
    return events.c.data.like(f"%{escaped}%", escape="/")


def record_findings(tx: Tx, grace_ms: int, default_timeout_ms: int | None = None) -> dict[str, Any]:
    """:func:`findings`, with an event for each overdue cursor, overrunning run or stranded
    occurrence seen for the first time; ``new_events`` counts them."""
    # Taken before the reads: under READ COMMITTED each later statement then sees
    # what a recorder that held the lock first committed.
    tx.lock(ADVISORY_XACT_LOCK, {"key": _RECORDING_LOCK})
    found = findings(tx, grace_ms, default_timeout_ms)
    new = 0
    for late in found["overdue"]:
        new += _record_once(
            tx,
            EventType.WATCHDOG_OVERDUE,
            (events.c.job_id == late["job_id"], _holds("trigger_key", late["trigger_key"])),
            job_id=late["job_id"],
            trigger_key=late["trigger_key"],
            late_ms=late["late_ms"],
        )
    for run, type_, how_long in (
        *((run, EventType.WATCHDOG_OVERRUN, "over_ms") for run in found["overrunning"]),
        *((run, EventType.WATCHDOG_STRANDED, "waiting_ms") for run in found["stranded"]),
    ):
        recorded = _record_once(
            tx,
            type_,
            (events.c.occurrence_id == run["occurrence_id"], events.c.fence == run["fence"]),
            job_id=run["job_id"],
            occurrence_id=run["occurrence_id"],
            fence=run["fence"],
            **{how_long: run[how_long]},
        )
        if recorded:
            finding = _FINDINGS[type_]
            notices.notify(tx, run["occurrence_id"], run["fence"], finding, finding=True)
        new += recorded
    return {**found, "new_events": new}
