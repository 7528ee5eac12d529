"""What an unsettled occurrence waits for (kernel.statements.blockers decides it in SQL)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from kernel.db.tx import Tx
from kernel.errors import NotFound
from kernel.records import loads, to_dt
from kernel.statements.blockers import BLOCKERS, LAST_JOB_DISABLED, STRANDED
from kernel.types import iso_z

__all__ = ["Blocker", "blocker", "blockers", "stranded"]


@dataclass(frozen=True, slots=True)
class Blocker:
    """Why ``occurrence_id`` is not claimable now (``kind``, one of
    :data:`kernel.statements.blockers.BLOCKER_KINDS`; ``none``: it is), with what names
    it: the occurrence it waits for, the time it waits for, its pool, why its job is
    disabled. ``text`` says it for a person."""

    occurrence_id: int
    job_id: str
    kind: str
    text: str
    waits_for: int | None = None
    not_before: str | None = None
    pool: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _text(row: Any, job_disabled_by: str | None) -> str:
    kind = row.blocker
    if kind == "awaiting_approval":
        return "awaiting approval (kernel occurrences approve|reject)"
    if kind == "awaiting_adjudication" and row.waits_for == row.id:
        return "awaiting adjudication: its outcome is unknown (kernel adjudicate)"
    if kind == "awaiting_adjudication":
        return f"awaiting adjudication of occurrence {row.waits_for} (at-most-once)"
    if kind == "paused":
        return "paused (kernel resume)"
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
    data = tx.conn.execute(LAST_JOB_DISABLED, {"job_id": job_id}).scalar()
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
    )


def blockers(tx: Tx, occurrence_ids: list[int]) -> dict[int, Blocker | None]:
    """The blocker of each occurrence found (None: running or settled, it waits for
    nothing); an id not found is left out."""
    rows = tx.conn.execute(BLOCKERS, {"ids": list(occurrence_ids), "now": tx.now}).all()
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
        for r in tx.conn.execute(STRANDED, params)
    ]
