"""Fan-in: a job that fires once all of several parents succeeded for the same logical
firing (``after: {all: [A, B], within: 1h}``), as Airflow runs a task once its upstream
tasks succeeded for one logical date.

A logical firing is the scheduled instant a parent occurrence's trigger key names, whatever
the parent's kind: ``cron:2026-03-02T12:00:00Z``, ``every:...``, ``at:...`` (backfilled
occurrences carry the same keys) and a fan-in's own ``fan_in:...`` (fan-ins nest). Beat
judges each fan-in job every tick (:func:`judge_fan_ins`), over the parent occurrences of
the last ``within`` (plus :data:`LOOKBACK_MARGIN_MS`); each instant any parent has
reached is decided once, by the unique (job, ``fan_in:<instant>``) key:

* every parent has a succeeded occurrence of the instant, settled within ``within`` of
  it: an occurrence is made, admitted by the job's overlap policy and ``max_queued``;
* a parent's occurrence of the instant ended otherwise (dead letter, cancelled, skipped):
  skipped, reason ``fan_in_parent_failed`` (the event names the parent and its status);
* ``within`` (plus :data:`SETTLE_GRACE_MS`, for a settle still committing) has passed
  and a parent has not succeeded: skipped, reason ``fan_in_timeout`` (the event names the
  parents missing);
* else it waits.

A parent's success is final, so reading it before the insert decides nothing a later
write could undo; two Beats judging the same instant make one row (the unique key).
A fan-in job holds :data:`FAN_IN_MARK` in ``jobs.after_job``: Beat finds fan-in jobs by
that index, and no parent's settle takes it for a chained child.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from kernel.db.schema import jobs, occurrences
from kernel.errors import InvalidArgument, StateConflict
from kernel.occurrences.firing import admit, create_gated, lock_job
from kernel.records import job_from_row
from kernel.states import OccurrenceStatus
from kernel.transaction.tx import Tx
from kernel.types import Job

__all__ = [
    "FAN_IN_MARK",
    "FAN_IN_PARENT_FAILED",
    "FAN_IN_TIMEOUT",
    "FanInReport",
    "check_fan_in",
    "judge_fan_ins",
    "refuse_parent_delete",
]

#: ``jobs.after_job`` of a fan-in job: no job id can be this (ids start alphanumeric).
FAN_IN_MARK = "*fan-in*"
FAN_IN_PARENT_FAILED = "fan_in_parent_failed"
FAN_IN_TIMEOUT = "fan_in_timeout"
#: Past ``within`` a missing parent times out only after this, so that a success settled
#: in time but still committing when Beat looks is not taken for a miss.
SETTLE_GRACE_MS = 15_000
#: How far past ``within`` (and the grace) Beat still looks at an instant: a Beat down no
#: longer than this still records its timeout.
LOOKBACK_MARGIN_MS = 600_000
#: Trigger-key kinds that name a logical firing by its instant.
_LOGICAL_KINDS = ("cron", "every", "at", "fan_in")
_FAN_IN_JOBS_PER_TICK = 200

S = OccurrenceStatus
OCC = occurrences


@dataclass(frozen=True, slots=True)
class FanInReport:
    """What one pass did: occurrences made, instants skipped (job, trigger key, reason)."""

    created: tuple[int, ...] = ()
    skipped: tuple[tuple[str, str, str], ...] = field(default=())


def check_fan_in(tx: Tx, job_id: str, parents: Iterable[str]) -> None:
    """Refuse a fan-in naming a job that does not exist (``after.all``)."""
    named = list(parents)
    found = set(tx.conn.execute(sa.select(jobs.c.id).where(jobs.c.id.in_(named))).scalars())
    missing = [name for name in named if name not in found]
    if missing:
        raise InvalidArgument(
            "after.all",
            f"job(s) {missing} do not exist; define the parents before the fan-in job",
            job_id=job_id,
            missing=missing,
        )


def refuse_parent_delete(tx: Tx, job_id: str) -> None:
    """Refuse deleting a job a fan-in waits for (StateConflict naming the fan-ins)."""
    fan_ins = _fan_in_jobs(tx, enabled_only=False, limit=None)
    waiting = sorted(job.id for job in fan_ins if job_id in _parents(job))
    if waiting:
        raise StateConflict(
            f"fan-in job(s) {waiting} wait for {job_id!r} (after.all); change or delete them first",
            job_id=job_id,
            children=waiting,
        )


def _fan_in_jobs(tx: Tx, *, enabled_only: bool, limit: int | None) -> list[Job]:
    """Fan-in jobs, by the ``jobs_after`` index on :data:`FAN_IN_MARK`."""
    query = sa.select(jobs).where(jobs.c.after_job == FAN_IN_MARK).order_by(jobs.c.id)
    if enabled_only:
        query = query.where(jobs.c.enabled)
    return [job_from_row(row) for row in tx.conn.execute(query.limit(limit))]


def _parents(job: Job) -> list[str]:
    return list(job.spec["after"]["all"])


def _instant(trigger_key: str) -> str | None:
    kind, sep, instant = trigger_key.partition(":")
    return instant if sep and kind in _LOGICAL_KINDS else None


def _ms(instant: str) -> int:
    return int(datetime.fromisoformat(instant).timestamp() * 1000)


def judge_fan_ins(tx: Tx) -> FanInReport:
    """Decide every instant the enabled fan-in jobs' parents reached lately (see above)."""
    created: list[int] = []
    skipped: list[tuple[str, str, str]] = []
    for job in _fan_in_jobs(tx, enabled_only=True, limit=_FAN_IN_JOBS_PER_TICK):
        made, passed = _judge(tx, job)
        created += made
        skipped += [(job.id, key, reason) for key, reason in passed]
    return FanInReport(tuple(created), tuple(skipped))


def _judge(tx: Tx, job: Job) -> tuple[list[int], list[tuple[str, str]]]:
    parents = _parents(job)
    within_ms = int(job.spec["after"]["within"] * 1000)
    since = tx.now - within_ms - SETTLE_GRACE_MS - LOOKBACK_MARGIN_MS
    rows = tx.conn.execute(
        sa.select(OCC.c.job_id, OCC.c.id, OCC.c.trigger_key, OCC.c.status, OCC.c.settled_at)
        .where(OCC.c.job_id.in_(parents), OCC.c.scheduled_for >= since)
        .order_by(OCC.c.id)
    ).all()
    # instant -> parent -> its occurrence of the instant
    reached: dict[str, dict[str, Any]] = {}
    for row in rows:
        instant = _instant(row.trigger_key)
        if instant is not None:
            reached.setdefault(instant, {})[row.job_id] = row
    if not reached:
        return [], []
    keys = {instant: f"fan_in:{instant}" for instant in reached}
    decided = set(
        tx.conn.execute(
            sa.select(OCC.c.trigger_key).where(
                OCC.c.job_id == job.id, OCC.c.trigger_key.in_(list(keys.values()))
            )
        ).scalars()
    )
    made: list[int] = []
    passed: list[tuple[str, str]] = []
    for instant in sorted(reached):
        key = keys[instant]
        if key in decided:
            continue
        joined = _join(parents, reached[instant], _ms(instant), within_ms, tx.now)
        if joined is None:
            continue
        reason, data = joined
        if reason is None and not lock_job(tx, job.id).enabled:
            continue  # disabled since it was read: no new run
        outcome = create_gated(
            tx,
            job_id=job.id,
            spec=job.spec,
            refused=reason if reason is not None else admit(tx, job.id, job.spec),
            revision=job.revision,
            trigger_key=key,
            scheduled_for=_ms(instant),
            extra=data,
        )
        if not outcome.created or outcome.id is None:
            continue
        if outcome.status == S.SKIPPED:
            passed.append((key, outcome.skip_reason or "skipped"))
        else:
            made.append(outcome.id)
    return made, passed


def _join(
    parents: list[str], reached: dict[str, Any], instant_ms: int, within_ms: int, now: int
) -> tuple[str | None, dict[str, Any]] | None:
    """(skip reason or None to fire, event data), or None while it waits."""
    failed = {
        name: row.status
        for name, row in reached.items()
        if row.status in (S.DEAD_LETTER.value, S.CANCELLED.value, S.SKIPPED.value)
    }
    if failed:
        name = sorted(failed)[0]
        return FAN_IN_PARENT_FAILED, {"parent": name, "parent_status": failed[name]}
    deadline = instant_ms + within_ms
    in_time = {
        name
        for name, row in reached.items()
        if row.status == S.SUCCEEDED.value and row.settled_at <= deadline
    }
    parent_ids = {name: row.id for name, row in reached.items()}
    if in_time == set(parents):
        return None, {"parents": [parent_ids[name] for name in parents]}
    if now > deadline + SETTLE_GRACE_MS:
        missing = [name for name in parents if name not in in_time]
        return FAN_IN_TIMEOUT, {"missing": missing}
    return None
