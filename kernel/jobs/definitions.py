"""Job definitions and Beat's fire cursor."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from kernel.db.schema import jobs, occurrences
from kernel.errors import InvalidArgument, NotFound, RevisionConflict, StateConflict
from kernel.events import EventType
from kernel.jobs.chain_order import parents_first
from kernel.jobs.fan_in import FAN_IN_MARK, check_fan_in, refuse_parent_delete
from kernel.jobs.retirement import count_runs, retire, retirement, runs_left
from kernel.limits.budgets import check_ref
from kernel.limits.chaining import MAX_CHAIN_DEPTH, fanout_limit
from kernel.occurrences.firing import admit, create_gated, create_occurrence, lock_job
from kernel.records import dumps, job_from_row, loads, to_dt
from kernel.redaction import redacted_spec
from kernel.spec.jobspec import JobSpec, validate_job_spec
from kernel.states import UNSETTLED, OccurrenceStatus
from kernel.transaction.tx import Tx
from kernel.transitions import door
from kernel.transitions.jobs import (
    BEAT_ADVANCES_CURSOR,
    BEAT_PLANS_CURSOR,
    JOB_DEFINED,
    JOB_REVISED,
    LIVE_JOB_REVISED,
    OPERATOR_DELETES_JOB,
    OPERATOR_DISABLES_JOB,
    OPERATOR_ENABLES_JOB,
)
from kernel.types import Job

__all__ = [
    "FireReport",
    "apply_job",
    "apply_jobs",
    "define_job",
    "revise_job",
    "set_enabled",
    "delete_job",
    "get_job",
    "due_jobs",
    "fire",
]

S = OccurrenceStatus


@dataclass(frozen=True, slots=True)
class FireReport:
    """What one cursor advance did. ``stale`` means another Beat got there first."""

    stale: bool
    created: tuple[int, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()  # (trigger key, reason)


def get_job(tx: Tx, job_id: str) -> Job:
    row = tx.conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).first()
    if row is None:
        raise NotFound(f"job {job_id!r} does not exist", job_id=job_id)
    return job_from_row(row)


def _check_chain(tx: Tx, spec: JobSpec) -> None:
    """Refuse a missing parent, cycles, depth beyond the limit, and fan-out beyond the limit."""
    if spec.after is None:
        return
    if spec.after.all is not None:
        check_fan_in(tx, spec.id, spec.after.all)
        return
    if tx.conn.execute(sa.select(jobs.c.id).where(jobs.c.id == spec.after.job)).first() is None:
        raise InvalidArgument(
            "after.job",
            f"job {spec.after.job!r} does not exist; define the parent before the jobs "
            "chained after it",
            job_id=spec.id,
            parent=spec.after.job,
        )
    seen = {spec.id}
    parent: str | None = spec.after.job
    depth = 1
    while parent is not None:
        if parent in seen:
            raise InvalidArgument(
                "after.job", f"chaining {spec.id!r} after {spec.after.job!r} makes a cycle"
            )
        seen.add(parent)
        depth += 1
        if depth > MAX_CHAIN_DEPTH:
            raise InvalidArgument("after.job", f"chain deeper than {MAX_CHAIN_DEPTH} jobs")
        parent = tx.conn.execute(sa.select(jobs.c.after_job).where(jobs.c.id == parent)).scalar()
    sibling_specs = tx.conn.execute(
        sa.select(jobs.c.spec).where(jobs.c.after_job == spec.after.job, jobs.c.id != spec.id)
    ).scalars()
    siblings = [loads(stored) for stored in sibling_specs]
    limit = fanout_limit([*siblings, spec.to_dict()])
    if len(siblings) >= limit:
        raise InvalidArgument(
            "after.job",
            f"job {spec.after.job!r} already has {len(siblings)} chained children and a "
            f"fan-out bound of {limit} (after.fanout)",
        )


def _definition(tx: Tx, spec: JobSpec) -> dict[str, Any]:
    """The binds of DEFINE_JOB and REVISE_JOB for ``spec``."""
    return {
        "job_id": spec.id,
        "digest": spec.digest,
        "spec": dumps(spec.to_dict()),
        "enabled": spec.enabled,
        "after_job": None if spec.after is None else spec.after.job or FAN_IN_MARK,
        "now": tx.now,
    }


def _by(operator: str | None) -> dict[str, Any]:
    """The event data naming who made a definition change, when known."""
    return {"operator": operator} if operator else {}


def define_job(tx: Tx, raw: Mapping[str, Any], operator: str | None = None) -> tuple[Job, bool]:
    """Create a job; identical content again is a no-op; other content under the id is refused."""
    spec = validate_job_spec(raw)
    existing = tx.conn.execute(sa.select(jobs).where(jobs.c.id == spec.id)).first()
    if existing is not None:
        if existing.digest == spec.digest:
            return job_from_row(existing), False
        raise StateConflict(
            f"job {spec.id!r} exists with other content (revision {existing.revision}); "
            "revise it with its expected revision, or apply the job file",
            job_id=spec.id,
            revision=existing.revision,
        )
    _check_chain(tx, spec)
    check_ref(tx, spec.id, spec.to_dict().get("budget"))
    inserted = door.run(tx, JOB_DEFINED, _definition(tx, spec))
    if inserted is None:  # a concurrent definer won; compare with what it wrote
        return define_job(tx, raw, operator)
    tx.emit(
        EventType.JOB_DEFINED,
        job_id=spec.id,
        revision=1,
        digest=spec.digest,
        spec=redacted_spec(spec.to_dict()),
        **_by(operator),
    )
    return get_job(tx, spec.id), True


def revise_job(
    tx: Tx, raw: Mapping[str, Any], expected_revision: int, operator: str | None = None
) -> tuple[Job, bool]:
    """Replace a job's definition if its revision is still ``expected_revision``.

    Identical content is a no-op (no new revision). Occurrences already created
    keep their snapshot; Beat re-plans the cursor from the new definition, starting
    at the old cursor when that was already due (else at the edit).
    """
    spec = validate_job_spec(raw)
    current = get_job(tx, spec.id)
    current.check_revision(expected_revision)
    if current.digest == spec.digest:
        return current, False
    _check_chain(tx, spec)
    check_ref(tx, spec.id, spec.to_dict().get("budget"))
    # A live job keeps a cursor that was already due: a firing due but not yet
    # materialised when the edit landed is then still made (under the new revision) or
    # recorded by the catch-up policy, not silently dropped.
    revise = LIVE_JOB_REVISED if current.enabled and spec.enabled else JOB_REVISED
    params = {**_definition(tx, spec), "expected_revision": expected_revision}
    changed = door.run_count(tx, revise, params)
    if changed != 1:
        raise RevisionConflict(f"job {spec.id!r} changed while being revised", job_id=spec.id)
    tx.emit(
        EventType.JOB_REVISED,
        job_id=spec.id,
        revision=expected_revision + 1,
        digest=spec.digest,
        previous_digest=current.digest,
        spec=redacted_spec(spec.to_dict()),
        **_by(operator),
    )
    return get_job(tx, spec.id), True


def apply_job(tx: Tx, raw: Mapping[str, Any], operator: str | None = None) -> tuple[Job, str]:
    """Upsert from a declarative source: ``created``, ``updated`` or ``unchanged``."""
    spec = validate_job_spec(raw)
    current = tx.conn.execute(sa.select(jobs.c.revision).where(jobs.c.id == spec.id)).scalar()
    if current is None:
        job, _ = define_job(tx, raw, operator)
        return job, "created"
    job, changed = revise_job(tx, raw, current, operator)
    return job, "updated" if changed else "unchanged"


def apply_jobs(
    tx: Tx, raws: Sequence[Mapping[str, Any]], operator: str | None = None
) -> list[tuple[Job, str]]:
    """Apply several definitions in one transaction: all of them, or (on any refusal) none.

    A parent in the batch is applied before the jobs chained after it, wherever it is
    listed; the results come back in the order given.
    """
    order = parents_first(raws)
    applied = {index: apply_job(tx, raws[index], operator) for index in order}
    return [applied[index] for index in range(len(raws))]


def set_enabled(
    tx: Tx, job_id: str, enabled: bool, operator: str | None = None, reason: str | None = None
) -> tuple[Job, bool]:
    """Enable or disable; enabling re-plans from now so a long pause does not burst.
    ``reason`` goes into the event when the kernel itself makes the change."""
    change = OPERATOR_ENABLES_JOB if enabled else OPERATOR_DISABLES_JOB
    changed = door.run(tx, change, {"job_id": job_id, "enabled": enabled, "now": tx.now})
    if changed is None:
        return get_job(tx, job_id), False  # already so (or NotFound)
    why: dict[str, Any] = {"reason": reason} if reason else {}
    tx.emit(
        EventType.JOB_ENABLED if enabled else EventType.JOB_DISABLED,
        job_id=job_id,
        revision=changed.revision,
        **_by(operator),
        **why,
    )
    return get_job(tx, job_id), True


def delete_job(tx: Tx, job_id: str, operator: str | None = None) -> None:
    """Delete a definition; refused while any of its occurrences is unsettled."""
    lock_job(tx, job_id)  # NotFound; on PostgreSQL no occurrence of it is made meanwhile
    refuse_parent_delete(tx, job_id)
    deleted = door.run(tx, OPERATOR_DELETES_JOB, {"job_id": job_id})
    if deleted is not None:
        tx.emit(EventType.JOB_DELETED, job_id=job_id, revision=deleted.revision, **_by(operator))
        return
    active = tx.conn.execute(
        sa.select(sa.func.count()).where(
            occurrences.c.job_id == job_id, occurrences.c.status.in_(UNSETTLED)
        )
    ).scalar_one()
    if active:
        raise StateConflict(
            f"job {job_id!r} has {active} unsettled occurrence(s); cancel or settle them first",
            job_id=job_id,
            active=active,
        )
    children = sorted(
        tx.conn.execute(sa.select(jobs.c.id).where(jobs.c.after_job == job_id)).scalars()
    )
    raise StateConflict(
        f"jobs {children} are chained after {job_id!r}; delete them first",
        job_id=job_id,
        children=children,
    )


def _index_predicate(name: str) -> sa.TextClause:
    """The WHERE of partial index ``name``, verbatim: SQLite uses a partial index only for
    its terms as written (``enabled = 1`` does not match ``enabled``: the query scanned)."""
    index = next(i for i in jobs.indexes if i.name == name)
    predicate: sa.TextClause = index.dialect_options["sqlite"]["where"]
    return predicate


_DUE = _index_predicate("jobs_due")
_UNPLANNED = _index_predicate("jobs_unplanned")


def due_jobs(tx: Tx, limit: int) -> list[Job]:
    """Jobs whose cursor is due, and jobs no Beat has planned yet (both by partial index)."""
    due = tx.conn.execute(
        sa.select(jobs)
        .where(_DUE, jobs.c.next_fire_at <= tx.now)
        .order_by(jobs.c.next_fire_at)
        .limit(limit)
    ).all()
    # Ordered by the index's own column: without table statistics PostgreSQL
    # otherwise prefers a sequential scan for a LIMIT query.
    unplanned = tx.conn.execute(
        sa.select(jobs).where(_UNPLANNED).order_by(jobs.c.id).limit(limit)
    ).all()
    return [job_from_row(r) for r in (*unplanned, *due)][:limit]


def fire(
    tx: Tx,
    job_id: str,
    *,
    expected_revision: int,
    expected_cursor: str | None,
    firings: Sequence[tuple[str, int]],
    missed: Sequence[tuple[str, int]],
    missed_reason: str | None,
    missed_count: int,
    next_cursor: tuple[str, int] | None,
) -> FireReport:
    """Advance the cursor by compare-and-set and materialise what it passed.

    The CAS names the revision and the cursor the caller planned from, so a Beat
    holding a stale view changes nothing. Firings go through the job's overlap
    policy; missed ones are recorded as skipped with ``missed_reason``, and all
    ``missed_count`` of them (``missed`` lists at most the oldest) in one
    ``firings_missed`` event spanning them.
    """
    advance = BEAT_PLANS_CURSOR if expected_cursor is None else BEAT_ADVANCES_CURSOR
    params = {
        "job_id": job_id,
        "expected_revision": expected_revision,
        "expected_cursor": expected_cursor,
        "next_trigger_key": next_cursor[0] if next_cursor else None,
        "next_fire_at": next_cursor[1] if next_cursor else None,
    }
    advanced = door.run(tx, advance, params)
    if advanced is None:
        return FireReport(stale=True)
    spec = loads(advanced.spec)
    created: list[int] = []
    skipped: list[tuple[str, str]] = []
    left = runs_left(spec["schedule"], advanced.scheduled_runs)
    if left == 0:  # its max_runs are made (it was enabled again): retired, nothing owed
        missed, missed_count, firings = (), 0, ()
    for key, at in missed:
        made = create_occurrence(
            tx,
            job_id=job_id,
            revision=expected_revision,
            spec=spec,
            trigger_key=key,
            scheduled_for=at,
            status=S.SKIPPED,
            skip_reason=missed_reason,
        )
        if made.created:
            skipped.append((key, missed_reason or "missed"))
    if missed_count:
        _record_missed(tx, job_id, missed, missed_count, missed_reason, firings, next_cursor)
    for key, at in firings:
        if left == 0:
            break  # its max_runs are made: the job retires below
        made = create_gated(
            tx,
            job_id=job_id,
            spec=spec,
            refused=admit(tx, job_id, spec),
            revision=expected_revision,
            trigger_key=key,
            scheduled_for=at,
        )
        if made.created and made.id is not None:
            if made.status == S.SKIPPED:
                skipped.append((key, made.skip_reason or "skipped"))
            else:
                created.append(made.id)
                left = None if left is None else left - 1
    if created:
        made_in_all = count_runs(tx, job_id, expected_revision, len(created))
        left = runs_left(spec["schedule"], made_in_all)
    reason = retirement(spec["schedule"], next_cursor is None, left)
    if reason is not None:
        runs = {"max_runs": spec["schedule"]["max_runs"]} if left == 0 else {}
        retire(tx, job_id, expected_revision, reason, **runs)
    return FireReport(stale=False, created=tuple(created), skipped=tuple(skipped))


def _record_missed(
    tx: Tx,
    job_id: str,
    missed: Sequence[tuple[str, int]],
    count: int,
    reason: str | None,
    firings: Sequence[tuple[str, int]],
    next_cursor: tuple[str, int] | None,
) -> None:
    """One event for every firing missed in this advance: the span runs from the oldest
    missed firing up to (not including) the first one fired, or the new cursor."""
    until = firings[0][1] if firings else next_cursor[1] if next_cursor else None
    tx.emit(
        EventType.FIRINGS_MISSED,
        job_id=job_id,
        count=count,
        recorded=len(missed),
        reason=reason,
        first_at=_iso(missed[0][1]) if missed else None,
        until_at=_iso(until),
    )


def _iso(ms: int | None) -> str | None:
    at = to_dt(ms)
    return None if at is None else at.isoformat()
