"""Read-only queries: occurrences, jobs, events, runtime controls, status."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from kernel import statements as st
from kernel.db.schema import (
    SETTLED_KEY,
    SETTLED_WHERE,
    controls,
    events,
    jobs,
    occurrences,
)
from kernel.errors import InvalidArgument, NotFound
from kernel.records import event_from_row, from_dt, job_from_row, occurrence_from_row
from kernel.statements.predicates import claimable_now, lease_expired, status_is
from kernel.states import SETTLED, ControlState, OccurrenceStatus
from kernel.transaction.tx import Tx
from kernel.types import Event, Job, Occurrence

__all__ = [
    "MAX_LIST",
    "get_occurrence",
    "list_occurrences",
    "list_jobs",
    "read_events",
    "last_event_id",
    "RUNTIME_STATES",
    "MAX_RUNTIME_CONTROLS",
    "runtime_controls",
    "status_counts",
    "COUNT_CAP",
]

MAX_LIST = 1000
S = OccurrenceStatus
OCC = occurrences


def _bounded(limit: int) -> int:
    if not 1 <= limit <= MAX_LIST:
        raise InvalidArgument("limit", f"must be between 1 and {MAX_LIST}")
    return limit


def get_occurrence(tx: Tx, occurrence_id: int) -> Occurrence:
    row = tx.conn.execute(st.OCCURRENCE_BY_ID, {"occurrence_id": occurrence_id}).first()
    if row is None:
        raise NotFound(f"occurrence {occurrence_id} does not exist", occurrence_id=occurrence_id)
    return occurrence_from_row(
        row, tx.conn.execute(st.CONTROL_BY_ID, {"occurrence_id": occurrence_id}).first()
    )


def list_occurrences(
    tx: Tx,
    *,
    job_id: str | None,
    statuses: tuple[str, ...] | None,
    limit: int,
    before_id: int | None = None,
) -> list[Occurrence]:
    """Newest first, with their controls; ``before_id`` pages backwards.

    ``statuses`` may name ``paused``: occurrences whose control is paused.
    """
    query = (
        sa.select(OCC, *[c.label(f"c_{c.name}") for c in controls.c])
        .select_from(OCC.outerjoin(controls, controls.c.occurrence_id == OCC.c.id))
        .order_by(OCC.c.id.desc())
        .limit(_bounded(limit))
    )
    if job_id is not None:
        query = query.where(OCC.c.job_id == job_id)
    if statuses:
        # "paused" is no status of its own: a queued or retry_wait row whose control is paused.
        known = [*(s.value for s in S), ControlState.PAUSED.value]
        bad = set(statuses) - set(known)
        if bad:
            raise InvalidArgument("status", f"unknown status {sorted(bad)}; one of {known}")
        real = [s for s in statuses if s != ControlState.PAUSED]
        query = query.where(
            sa.or_(
                OCC.c.status.in_(real),
                controls.c.state == ControlState.PAUSED
                if ControlState.PAUSED in statuses
                else sa.false(),
            )
        )
    if before_id is not None:
        query = query.where(OCC.c.id < before_id)
    result = []
    for row in tx.conn.execute(query):
        m = row._mapping
        control = None
        if m["c_state"] is not None:
            control = _ControlRow({c.name: m[f"c_{c.name}"] for c in controls.c})
        result.append(occurrence_from_row(row, control))  # type: ignore[arg-type]
    return result


class _ControlRow:
    """Adapts a joined control's columns to the row shape the record mapper reads."""

    def __init__(self, mapping: dict[str, Any]) -> None:
        self._mapping = mapping


def list_jobs(tx: Tx) -> list[Job]:
    return [job_from_row(r) for r in tx.conn.execute(sa.select(jobs).order_by(jobs.c.id))]


def read_events(
    tx: Tx,
    *,
    after_id: int,
    job_id: str | None,
    occurrence_id: int | None,
    limit: int,
    before_id: int | None = None,
    types: Sequence[str] | None = None,
    since: datetime | None = None,
) -> list[Event]:
    """Events with id > ``after_id`` in order: pass the last id back as the cursor.

    With ``before_id``, the newest ``limit`` events below it (still oldest first):
    pass the first id back to page towards older events. ``types`` and ``since``
    keep only events of those types, and at or after that instant.
    """
    query = sa.select(events).where(events.c.id > after_id)
    if before_id is not None:
        query = query.where(events.c.id < before_id)
    if types:
        # Inline: a job's definition events are a partial index whose predicate names the
        # types, and SQLite uses it only for a query that names them as literals too.
        known: sa.BindParameter[list[str]] = sa.bindparam(
            "types", sorted(set(types)), expanding=True, literal_execute=True
        )
        query = query.where(events.c.type.in_(known))
    if since is not None:
        query = query.where(events.c.at >= from_dt(since))
    if job_id is not None:
        query = query.where(events.c.job_id == job_id)
    if occurrence_id is not None:
        query = query.where(events.c.occurrence_id == occurrence_id)
    newest = before_id is not None
    query = query.order_by(events.c.id.desc() if newest else events.c.id).limit(_bounded(limit))
    found = [event_from_row(r) for r in tx.conn.execute(query)]
    return found[::-1] if newest else found


def last_event_id(tx: Tx) -> int:
    return int(
        tx.conn.execute(sa.select(sa.func.coalesce(sa.func.max(events.c.id), 0))).scalar_one()
    )


#: The runtime states a control listing shows, and its cap.
RUNTIME_STATES = ("running", "pause_requested", "paused")
MAX_RUNTIME_CONTROLS = 200


def runtime_controls(
    tx: Tx, limit: int, statuses: Sequence[str] | None, kinds: Sequence[str] | None
) -> list[dict[str, Any]]:
    """Running, pause-requested and paused occurrences for dashboards, most recently
    changed first; no payload and no lease owner. ``limit`` is capped at 200."""
    if limit < 1:
        raise InvalidArgument("limit", "must be a positive integer")
    unknown = sorted(set(statuses or ()) - set(RUNTIME_STATES))
    if unknown:
        raise InvalidArgument("statuses", f"unknown {unknown}; known: {list(RUNTIME_STATES)}")
    # Two parts, each bounded by live work: running rows through their partial index, and
    # rows with a pause control (requested or acknowledged) through the controls table.
    # One OR over both would walk the occurrences of every job (issue 42 item 4).
    pausing = (ControlState.PAUSE_REQUESTED, ControlState.PAUSED)
    running = _runtime_rows(
        OCC.outerjoin(controls, controls.c.occurrence_id == OCC.c.id), status_is(S.RUNNING)
    )
    paused = _runtime_rows(
        controls.join(OCC, OCC.c.id == controls.c.occurrence_id),
        sa.and_(controls.c.state.in_(pausing), sa.not_(status_is(S.RUNNING))),
    )
    rows = sa.union_all(running, paused).subquery("runtime")
    query = (
        sa.select(rows)
        .order_by(rows.c.changed_at.desc(), rows.c.id)
        .limit(min(limit, MAX_RUNTIME_CONTROLS))
    )
    if statuses:
        query = query.where(rows.c.state.in_(tuple(statuses)))
    if kinds:
        query = query.where(rows.c.kind.in_(tuple(kinds)))
    return [
        {
            "id": r.id,
            "job_id": r.job_id,
            "kind": r.kind,
            "status": r.status,
            "fence": r.fence,
            "attempt": r.attempt,
            "lease_expires_at": r.lease_expires_at,
            "state": r.state,
            "control_revision": r.revision,
            "updated_at": r.changed_at,
        }
        for r in tx.conn.execute(query)
    ]


def _runtime_rows(joined: sa.FromClause, where: sa.ColumnElement[bool]) -> sa.Select[Any]:
    """One part of :func:`runtime_controls`: its columns over ``joined`` rows meeting ``where``."""
    state = sa.case(
        (controls.c.state == ControlState.PAUSED, "paused"),
        (controls.c.state == ControlState.PAUSE_REQUESTED, "pause_requested"),
        else_="running",
    )
    changed = sa.case(
        (controls.c.updated_at > OCC.c.updated_at, controls.c.updated_at), else_=OCC.c.updated_at
    )
    return (
        sa.select(
            OCC.c.id,
            OCC.c.job_id,
            OCC.c.kind,
            OCC.c.status,
            OCC.c.fence,
            OCC.c.attempt,
            OCC.c.lease_expires_at,
            state.label("state"),
            controls.c.revision,
            changed.label("changed_at"),
        )
        .select_from(joined)
        .where(where)
    )


#: Final states are counted up to this many: beyond it the count says "at least" (in
#: ``capped``), so a status read costs the same with a year of history as with a day's.
COUNT_CAP = 10_000
#: Each unsettled state counted through the partial index whose predicate the count
#: repeats; SQLite is told the index (``INDEXED BY``): without statistics its planner
#: prefers walking ``occurrences_job``, which covers every row of history.
_LIVE_COUNTS = (
    (
        "occurrences_claimable",
        "status IN ('queued', 'retry_wait') AND NOT EXISTS (SELECT 1 FROM controls"
        " WHERE controls.occurrence_id = occurrences.id AND controls.state = 'paused')",
    ),
    ("occurrences_running", "status = 'running'"),
    ("occurrences_awaiting_approval", "status = 'awaiting_approval'"),
    ("occurrences_adjudication", "status = 'needs_adjudication'"),
)


def _live_count_sql(dialect: str) -> sa.TextClause:
    return sa.text(
        " UNION ALL ".join(
            "SELECT status, count(*) AS n FROM occurrences"
            + (f" INDEXED BY {index}" if dialect == "sqlite" else "")
            + f" WHERE {where} GROUP BY status"
            for index, where in _LIVE_COUNTS
        )
    )


def _count_query() -> sa.CompoundSelect[Any]:
    """Each final state counted up to COUNT_CAP + 1 by a seek on
    ``occurrences_settled_by_status``: its predicate and key expression repeated as the
    index states them (kernel/db/schema.py), the state written into the text."""
    parts: list[sa.Select[str, int]] = []
    for state in SETTLED:
        bounded = (
            sa.select(sa.literal_column("1").label("one"))
            .select_from(OCC)
            .where(
                SETTLED_WHERE,
                # The index's key as it is written, then the state.
                SETTLED_KEY == sa.literal(state.value, literal_execute=True),  # noqa: SIM300
            )
            .limit(COUNT_CAP + 1)
            .subquery()
        )
        parts.append(
            sa.select(
                sa.literal(state.value).label("status"), sa.func.count().label("n")
            ).select_from(bounded)
        )
    return sa.union_all(*parts)


def status_counts(tx: Tx) -> dict[str, Any]:
    """Counts per status, leases about to expire, paused, oldest claimable age (ms) and id.

    A paused occurrence is counted once, under ``paused`` (``counts`` has that key after
    the statuses), not also under the status its row keeps (retry_wait). A final state
    with more than COUNT_CAP occurrences counts COUNT_CAP and is named in ``capped``.
    """
    counts = {s.value: 0 for s in S}
    capped = []
    live = tx.conn.execute(_live_count_sql(tx.conn.dialect.name)).all()
    for status, n in [*live, *tx.conn.execute(_count_query())]:
        if status in SETTLED and n > COUNT_CAP:
            n = COUNT_CAP
            capped.append(status)
        counts[status] += n
    paused = tx.conn.execute(
        sa.select(sa.func.count()).where(controls.c.state == ControlState.PAUSED)
    ).scalar_one()
    counts[ControlState.PAUSED.value] = paused
    expiring = tx.conn.execute(
        sa.select(sa.func.count()).where(lease_expired(tx.now + 10_000, literal_status=True))
    ).scalar_one()
    oldest = tx.conn.execute(
        sa.select(OCC.c.id, OCC.c.available_at)
        .where(claimable_now(tx.now, literal_status=True))
        .order_by(OCC.c.available_at, OCC.c.id)
        .limit(1)
    ).first()
    return {
        "counts": counts,
        "capped": capped,
        "paused": paused,
        "leases_expiring_10s": expiring,
        "oldest_claimable_age_ms": None if oldest is None else tx.now - oldest.available_at,
        # Its blocker says whether it waits for a worker or for something else.
        "oldest_claimable_id": None if oldest is None else oldest.id,
        "now_ms": tx.now,
    }
