"""Watchdog jobs: what a check's report does, in the transaction that settles its run.

A ``watchdog`` run succeeds with ``{"watchdog": report}`` (``adapters.watchdog``).
When it settles, :func:`record_report` (run by the facade in the settle's transaction):

* appends ``watchdog_alert`` when the check failed (job, occurrence, the watched
  ``target``, the check, ``reason``, ``exit_code``, ``message``, ``output_tail``,
  whether the watch is over);
* when the payload's ``self_destruct`` holds (the default) and the check passed (the
  condition it watches for holds) or the watch is over (``watch_for`` elapsed since
  ``started_at``, else since the job was last defined), disables the job through
  :func:`kernel.jobs.definitions.set_enabled` (event ``job_disabled``, ``reason`` one of
  :data:`SELF_DESTRUCTED`).

:func:`failing_watchdogs` lists the watchdog jobs whose latest check failed, for
``kernel status`` and the exporter.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from kernel.db.schema import jobs, occurrences
from kernel.events import EventType
from kernel.jobs.definitions import set_enabled
from kernel.records import loads
from kernel.states import OccurrenceStatus
from kernel.transaction.tx import Tx

__all__ = [
    "KIND",
    "SELF_DESTRUCTED",
    "failing_watchdogs",
    "record_report",
]

#: The kind, and the key of a watchdog run's result that holds its check's report.
KIND = "watchdog"
#: The ``job_disabled`` reason of a self-destruct, by whether the check passed.
SELF_DESTRUCTED = {True: "watchdog_check_passed", False: "watchdog_watch_over"}
OCC = occurrences
#: How the spec's JSON (kernel.records.dumps) spells a watchdog job's kind.
_KIND_JSON = f'%"kind":"{KIND}"%'


def record_report(tx: Tx, occurrence_id: int, fence: int, result: Any) -> None:
    """Alert and self-destruct as a settled watchdog run's report says (see the module)."""
    if not isinstance(result, Mapping) or not isinstance(result.get(KIND), Mapping):
        return
    row = tx.conn.execute(
        sa.select(OCC.c.job_id, OCC.c.definition).where(
            OCC.c.id == occurrence_id, OCC.c.kind == KIND
        )
    ).first()
    if row is None:
        return  # another kind's result that happens to look like a report
    job_id: str = row.job_id
    payload: dict[str, Any] = loads(row.definition)["payload"]
    report = result[KIND]
    passed = report.get("passed") is True
    over = _watch_over(tx, job_id, payload)
    if not passed:
        tx.emit(
            EventType.WATCHDOG_ALERT,
            job_id=job_id,
            occurrence_id=occurrence_id,
            fence=fence,
            target=payload["target"],
            check=_described(payload["check"]),
            reason=report.get("reason"),
            exit_code=report.get("exit_code"),
            message=report.get("message"),
            output_tail=report.get("output_tail"),
            watch_over=over,
            delivered=report.get("delivered"),
        )
    if payload["self_destruct"] and (passed or over):
        set_enabled(tx, job_id, False, reason=SELF_DESTRUCTED[passed])


def _watch_over(tx: Tx, job_id: str, payload: Mapping[str, Any]) -> bool:
    watch_for = payload["watch_for"]
    if watch_for is None:
        return False
    started = payload["started_at"]
    if started is None:
        start_ms = tx.conn.execute(
            sa.select(jobs.c.defined_at).where(jobs.c.id == job_id)
        ).scalar_one()
    else:
        start_ms = int(datetime.fromisoformat(started).timestamp() * 1000)
    return bool(tx.now >= start_ms + int(watch_for * 1000))


def _described(check: Mapping[str, Any]) -> str:
    """The check as a person reads it: the command line, or the function's path."""
    if "callable" in check:
        return str(check["callable"])
    return " ".join(check["argv"])


def failing_watchdogs(tx: Tx, limit: int) -> list[dict[str, Any]]:
    """Watchdog jobs whose latest settled check failed (at most ``limit``), by job id."""
    spec_rows = tx.conn.execute(
        sa.select(jobs.c.id, jobs.c.spec).where(jobs.c.spec.like(_KIND_JSON)).order_by(jobs.c.id)
    ).all()
    watchdogs = [r.id for r in spec_rows if loads(r.spec).get("kind") == KIND]
    if not watchdogs:
        return []
    latest = (
        sa.select(sa.func.max(OCC.c.id).label("id"))
        .where(OCC.c.job_id.in_(watchdogs), OCC.c.status == OccurrenceStatus.SUCCEEDED)
        .group_by(OCC.c.job_id)
        .subquery()
    )
    rows = tx.conn.execute(
        sa.select(OCC.c.id, OCC.c.job_id, OCC.c.result, OCC.c.settled_at)
        .join(latest, OCC.c.id == latest.c.id)
        .order_by(OCC.c.job_id)
    ).all()
    failing = []
    for r in rows:
        result = loads(r.result)
        report = result.get(KIND) if isinstance(result, Mapping) else None
        if isinstance(report, Mapping) and report.get("passed") is False:
            failing.append(
                {
                    "job_id": r.job_id,
                    "occurrence_id": r.id,
                    "reason": report.get("reason"),
                    "exit_code": report.get("exit_code"),
                    "message": report.get("message"),
                    "age_ms": tx.now - r.settled_at,
                }
            )
    return failing[:limit]
