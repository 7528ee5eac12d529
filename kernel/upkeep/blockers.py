"""Why an unsettled occurrence is not claimable now: its blocker, named by SQL built from
the very predicates a claim filters and decides with (predicates, JOB_ALLOWS_CLAIM,
blocking_in_job, ROOM_IN_POOL), so the claim and ``why`` cannot disagree; and the
occurrences nothing holds that no claim took (the watchdog's ``stranded``).

Each predicate is written for the ``occurrences`` table; here the occurrence asked about
is the alias ``waiting`` (the predicates are adapted to it), and ``occurrences`` is
another run of its job that may hold it back, as in BLOCKING_IN_JOB.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy import bindparam as p
from sqlalchemy.sql.util import ClauseAdapter

from kernel.db.schema import events, occurrences
from kernel.errors import NotFound
from kernel.events import EventType
from kernel.records import loads, to_dt
from kernel.statements.claims import JOB_ALLOWS_CLAIM, blocking_in_job
from kernel.statements.pools import ROOM_IN_POOL
from kernel.statements.predicates import (
    CLAIMABLE_STATUS,
    NOT_PAUSED,
    claimable_now,
    start_expired,
    status_is,
)
from kernel.states import CLAIMABLE
from kernel.transaction.tx import Tx
from kernel.types import iso_z

__all__ = ["BLOCKER_KINDS", "Blocker", "blocker", "blockers", "stranded"]

OCC = occurrences
W = occurrences.alias("waiting")


def _of_waiting(predicate: Any) -> Any:
    """``predicate`` about the occurrence asked about (``waiting``), not ``occurrences``."""
    return ClauseAdapter(W).traverse(predicate)


#: Every blocker, in the order they are named (the first that holds): what lasts until
#: a person acts first, then what passes by itself. ``none``: claimable now.
BLOCKER_KINDS = (
    "awaiting_approval",
    "awaiting_adjudication",
    "paused",
    "expired",
    "job_disabled",
    "not_before",
    "behind",
    "pool_full",
    "none",
)


def _first_in_job(unresolved: bool) -> sa.ScalarSelect[Any]:
    """The first run of the job that keeps ``waiting`` from starting, as the claim asks
    (claiming._job_blocks: only for an exclusive or at-most-once occurrence): one whose
    outcome waits for a verdict (``unresolved``), else one running or first in line."""
    other = blocking_in_job(
        W.c.job_id, W.c.id, W.c.exclusive, W.c.exclusive, p("now"), W.c.available_at
    )
    verdict = OCC.c.status == "needs_adjudication"
    return (
        sa.select(sa.func.min(OCC.c.id))
        .where(
            sa.or_(W.c.exclusive, W.c.delivery == "at-most-once"),
            other,
            verdict if unresolved else ~verdict,
        )
        .scalar_subquery()
    )


_unresolved_of = _first_in_job(unresolved=True)
_behind = _first_in_job(unresolved=False)

#: NULL for a running or settled occurrence: it waits for nothing.
_kind = sa.case(
    (W.c.status == "awaiting_approval", "awaiting_approval"),
    (W.c.status == "needs_adjudication", "awaiting_adjudication"),
    (~_of_waiting(CLAIMABLE_STATUS), sa.null()),
    (~_of_waiting(NOT_PAUSED), "paused"),
    # Past its start deadline: the next claim or Beat's upkeep skips it; never stranded.
    (_of_waiting(start_expired(p("now"))), "expired"),
    (~_of_waiting(JOB_ALLOWS_CLAIM), "job_disabled"),
    (~_of_waiting(claimable_now(p("now"))), "not_before"),
    (_unresolved_of.is_not(None), "awaiting_adjudication"),
    (_behind.is_not(None), "behind"),
    (~_of_waiting(ROOM_IN_POOL), "pool_full"),
    else_="none",
)
#: The occurrence it waits for: itself awaiting a verdict, the unresolved run, the run ahead.
_waits_for = sa.case(
    (W.c.status == "needs_adjudication", W.c.id),
    (_unresolved_of.is_not(None), _unresolved_of),
    else_=_behind,
)

_blockers = sa.select(
    W.c.id,
    W.c.job_id,
    W.c.status,
    W.c.available_at,
    W.c.expires_at,
    W.c.pool,
    W.c.fence,
    _kind.label("blocker"),
    _waits_for.label("waits_for"),
)

#: The blockers of the occurrences ``ids`` at ``now``.
_BLOCKERS = _blockers.where(W.c.id.in_(p("ids", expanding=True))).order_by(W.c.id)

# The status as literals (status_is): SQLite then walks the partial index of waiting rows.
_stranded = _blockers.where(
    _of_waiting(status_is(*CLAIMABLE)), W.c.available_at < p("since")
).subquery()
#: Waiting occurrences that could have started before ``since`` and have no blocker at
#: ``now``: nothing holds them, yet no claim took them (the watchdog's ``stranded``).
_STRANDED = (
    sa.select(_stranded)
    .where(_stranded.c.blocker == "none")
    .order_by(_stranded.c.available_at, _stranded.c.id)
    .limit(p("limit"))
)

#: The data of the job's latest ``job_disabled`` event: who or what disabled it.
_LAST_JOB_DISABLED = (
    sa.select(events.c.data)
    .where(events.c.job_id == p("job_id"), events.c.type == EventType.JOB_DISABLED)
    .order_by(events.c.id.desc())
    .limit(1)
)


@dataclass(frozen=True, slots=True)
class Blocker:
    """Why ``occurrence_id`` is not claimable now (``kind``, one of
    :data:`kernel.statements.blockers.BLOCKER_KINDS`; ``none``: it is), with what names
    it: the occurrence it waits for, the time it waits for, its pool, why its job is
    disabled, its start deadline. ``text`` says it for a person."""

    occurrence_id: int
    job_id: str
    kind: str
    text: str
    waits_for: int | None = None
    not_before: str | None = None
    pool: str | None = None
    expires_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _text(row: Any, job_disabled_by: str | None) -> str:
    said = _said(row, job_disabled_by)
    if row.expires_at is None or row.blocker == "expired":
        return said
    return f"{said}; expires at {iso_z(to_dt(row.expires_at))} if not started by then"


def _said(row: Any, job_disabled_by: str | None) -> str:
    kind = row.blocker
    if kind == "awaiting_approval":
        return "awaiting approval (kernel occurrences approve|reject)"
    if kind == "awaiting_adjudication" and row.waits_for == row.id:
        return "awaiting adjudication: its outcome is unknown (kernel adjudicate)"
    if kind == "awaiting_adjudication":
        return f"awaiting adjudication of occurrence {row.waits_for} (at-most-once)"
    if kind == "paused":
        return "paused (kernel resume)"
    if kind == "expired":
        return (
            f"expired at {iso_z(to_dt(row.expires_at))} before it started: the next claim "
            "or Beat's upkeep records it skipped (expired)"
        )
    if kind == "job_disabled":
        return f"job {row.job_id} is disabled{job_disabled_by or ''} (kernel jobs enable)"
    if kind == "not_before":
        return f"not before {iso_z(to_dt(row.available_at))}"
    if kind == "behind":
        return f"behind occurrence {row.waits_for} (one run of the job at a time)"
    if kind == "pool_full":
        return f"pool {row.pool} is full"
    return "none: claimable now"


def _disabled_by(tx: Tx, job_id: str) -> str:
    """Who or what disabled the job, from its latest ``job_disabled`` event; none: its
    definition (a job file's ``enabled: false``)."""
    data = tx.conn.execute(_LAST_JOB_DISABLED, {"job_id": job_id}).scalar()
    said = loads(data) if data else {}
    if said.get("operator"):
        return f" by {said['operator']}"
    if said.get("reason"):
        return f" ({said['reason']})"
    return " by its definition"


def _blocker(tx: Tx, row: Any) -> Blocker | None:
    if row.blocker is None:
        return None
    job_disabled_by = _disabled_by(tx, row.job_id) if row.blocker == "job_disabled" else None
    return Blocker(
        occurrence_id=row.id,
        job_id=row.job_id,
        kind=row.blocker,
        text=_text(row, job_disabled_by),
        waits_for=row.waits_for,
        not_before=iso_z(to_dt(row.available_at)) if row.blocker == "not_before" else None,
        pool=row.pool if row.blocker == "pool_full" else None,
        expires_at=iso_z(to_dt(row.expires_at)),
    )


def blockers(tx: Tx, occurrence_ids: list[int]) -> dict[int, Blocker | None]:
    """The blocker of each occurrence found (None: running or settled, it waits for
    nothing); an id not found is left out."""
    rows = tx.conn.execute(_BLOCKERS, {"ids": list(occurrence_ids), "now": tx.now}).all()
    return {row.id: _blocker(tx, row) for row in rows}


def blocker(tx: Tx, occurrence_id: int) -> Blocker | None:
    """The blocker of one occurrence. Raises NotFound when there is no such occurrence."""
    found = blockers(tx, [occurrence_id])
    if occurrence_id not in found:
        raise NotFound(f"occurrence {occurrence_id} not found", occurrence_id=occurrence_id)
    return found[occurrence_id]


def stranded(tx: Tx, grace_ms: int, limit: int) -> list[dict[str, Any]]:
    """Waiting occurrences claimable for longer than ``grace_ms`` that no claim took: no
    blocker holds them (at most ``limit``, the longest waiting first)."""
    params = {"now": tx.now, "since": tx.now - grace_ms, "limit": limit}
    return [
        {
            "occurrence_id": r.id,
            "job_id": r.job_id,
            "status": r.status,
            "fence": r.fence,
            "waiting_ms": tx.now - r.available_at,
        }
        for r in tx.conn.execute(_STRANDED, params)
    ]
