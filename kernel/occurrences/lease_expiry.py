"""Expiries. A lease that expired: settled when it decides its own end, else left
reclaimable. A start deadline (Celery's ``expires``) that passed: an occurrence not started
by its ``expires_at`` is never started, it is settled skipped ``expired`` (a chord's
member fails its chord, as Celery's worker revokes an expired task).

Beat's upkeep settles both in batches (:func:`expire_leases`, :func:`skip_expired`); a
claim that finds one settles it first (:func:`expire`, :func:`skip_expired` of its id,
kernel/occurrences/claiming.py), so one with no worker does not wait either.
"""

from __future__ import annotations

from typing import Any

from kernel import statements as st
from kernel.events import EventType, settled_event
from kernel.limits import budgets, pools
from kernel.occurrences.chains import fire_children, fire_links
from kernel.occurrences.control import end_control
from kernel.records import dumps, loads, to_dt
from kernel.states import OccurrenceStatus
from kernel.transaction.tx import Tx
from kernel.transitions import door, notices
from kernel.transitions import occurrences as T
from kernel.types import iso_z

__all__ = ["ends_run", "expire_leases", "expire", "skip_expired"]

_ADJUDICATION_ERROR = dumps(
    {"code": "LEASE_EXPIRED", "message": "lease expired after the run may have begun"}
)
S = OccurrenceStatus


def expire_leases(tx: Tx, limit: int) -> dict[str, int]:
    """Settle what an expired lease decides on its own; leave the rest reclaimable.

    Cancel requested → cancelled; at-most-once → needs_adjudication (the run may
    have had its effect, I6); lost leases exhausted → dead_letter POISON_PILL.
    The EXPIRE statement makes that choice from the row as it is when it writes.
    """
    counts = {"cancelled": 0, "needs_adjudication": 0, "dead_letter": 0}
    freed: list[str] = []
    for row in tx.conn.execute(st.EXPIRED_LEASES, {"now": tx.now, "limit": limit}).all():
        to_status = expire(tx, row._mapping, give_back=False)
        if to_status is not None:
            counts[to_status.value] += 1
            if row.pool is not None:
                freed.append(row.pool)
    # Slots given back last, in name order: holding a pool's row while waiting for the
    # next expired occurrence's row would deadlock with a claim that settles that
    # expiry itself (it locks the occurrence, then the pool).
    for pool in sorted(freed):
        pools.give_back(tx, pool)
    return counts


def expire(tx: Tx, m: Any, *, give_back: bool = True) -> OccurrenceStatus | None:
    """Settle one expired lease (``m``: its occurrence row as read) if it decides its
    own end, with its events; None when it does not, or moved since it was read.
    ``give_back=False``: the caller gives the pool slot back (``m["pool"]``)."""
    expired = door.run(
        tx,
        T.LEASE_EXPIRES,
        {
            "occurrence_id": m["id"],
            "held_fence": m["fence"],
            "now": tx.now,
            "adjudication_error": _ADJUDICATION_ERROR,
            "exhausted_error": _poison_pill(m["lost_leases"]),
        },
    )
    if expired is None:
        return None
    if give_back:
        pools.give_back(tx, expired.pool)
    to_status = S(expired.status)
    if to_status != S.NEEDS_ADJUDICATION:
        end_control(tx, m["id"], job_id=m["job_id"], fence=m["fence"])
    error = loads(expired.last_error) if to_status != S.CANCELLED else None
    tx.emit(
        settled_event(to_status),
        job_id=m["job_id"],
        occurrence_id=m["id"],
        fence=m["fence"],
        reason="lease_expired",
        **({"error": error} if error else {}),
    )
    notices.ended_unanswered(tx, m["id"], m["fence"], to_status)
    if to_status == S.DEAD_LETTER:
        fire_children(
            tx,
            parent_id=m["id"],
            parent_job=m["job_id"],
            succeeded=False,
            result=None,
            error=error,
            parent_depth=m["chain_depth"],
        )
    if to_status in (S.DEAD_LETTER, S.CANCELLED):  # a cancelled chord member fails its chord
        fire_links(
            tx,
            parent_id=m["id"],
            links=expired.links,
            trigger_key=expired.trigger_key,
            succeeded=False,
            revoked="cancelled" if to_status == S.CANCELLED else None,
        )
    return to_status


def _poison_pill(lost: int) -> str:
    """The error of a run dead-lettered for losing one lease more than its bound."""
    return dumps(
        {
            "code": "POISON_PILL",
            "message": f"poison pill: the run lost its lease again after {lost} reclaim(s) "
            f"(max_lost_leases {lost}), each time with its worker; it is not reclaimed "
            "again: find what kills its workers, then requeue it",
        }
    )


def ends_run(o: Any) -> bool:
    """Whether EXPIRE settles this expired lease (``o``: a claim's read, its
    ``lost_leases_left`` included). EXPIRE's CASE, in Python only to choose the
    statement: EXPIRE decides again from the row when it writes."""
    poisoned = not o["lost_leases_left"]
    return bool(o["cancel_requested"]) or o["delivery"] == "at-most-once" or poisoned


def skip_expired(tx: Tx, *, occurrence_id: int | None = None, limit: int = 200) -> int:
    """Settle skipped ``expired`` the occurrence ``occurrence_id`` if its deadline passed
    (None: up to ``limit`` of every such one); how many were."""
    params = {"now": tx.now, "occurrence_id": occurrence_id, "limit": limit}
    skipped = door.run_all(tx, T.START_DEADLINE_PASSES, params)
    for row in skipped:
        # A resumed run's control ends with it; a run that never started gives back
        # the budget it reserved (a retry's first attempt spent it).
        end_control(tx, row.id, job_id=row.job_id, fence=row.fence)
        if row.attempt == 0:
            budgets.release(tx, row.id, job_id=row.job_id)
        tx.emit(
            EventType.OCCURRENCE_SKIPPED,
            job_id=row.job_id,
            occurrence_id=row.id,
            fence=row.fence,
            reason="expired",
            expires_at=iso_z(to_dt(row.expires_at)),
        )
        notices.owe_result(tx, row.id, row.fence, S.SKIPPED)
    # As Celery's worker revokes an expired task: its chord fails, no link is made. The
    # chords' rows are taken in id order, so two Beats' batches never wait in a cycle.
    for row in sorted(skipped, key=lambda r: (loads(r.links) or {}).get("chord") or ""):
        fire_links(
            tx,
            parent_id=row.id,
            links=row.links,
            trigger_key=row.trigger_key,
            succeeded=False,
            revoked="expired",
        )
    return len(skipped)
