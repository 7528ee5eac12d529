"""The dispatch pump's side: which occurrences to hint, marked hinted in the same write."""

from __future__ import annotations

import sqlalchemy as sa

from kernel import statements as st
from kernel.records import loads
from kernel.schema import occurrences
from kernel.statements.predicates import NOT_PAUSED, claimable_now
from kernel.states import OccurrenceStatus
from kernel.tx import Tx
from kernel.types import DispatchHint

__all__ = ["dispatch_batch", "mark_hinted"]

S = OccurrenceStatus
OCC = occurrences


def dispatch_batch(tx: Tx, *, limit: int, rehint_after_ms: int) -> list[DispatchHint]:
    """Claimable occurrences not hinted recently; marks them hinted now (SPEC §2.3)."""
    not_recent = sa.or_(
        OCC.c.dispatched_at.is_(None), OCC.c.dispatched_at <= tx.now - rehint_after_ms
    )
    running = OCC.alias("running")
    # An exclusive occurrence (overlap queue/replace) cannot start while another of
    # its job runs; hinting it would only make a worker refuse it.
    free_to_start = sa.or_(
        OCC.c.exclusive.is_(False),
        ~sa.exists().where(running.c.job_id == OCC.c.job_id, running.c.status == S.RUNNING),
    )
    waiting = sa.and_(
        claimable_now(tx.now),
        free_to_start,
        st.ROOM_IN_POOL,
        st.NO_UNRESOLVED_RUN,
        not_recent,
    )
    expired = sa.and_(
        OCC.c.status == S.RUNNING,
        OCC.c.lease_expires_at <= tx.now,
        OCC.c.delivery == "at-least-once",
        NOT_PAUSED,
        # The last hint led to the claim whose lease just expired: hint again at once.
        sa.or_(not_recent, OCC.c.dispatched_at < OCC.c.lease_expires_at),
    )
    hints: list[DispatchHint] = []
    for condition in (waiting, expired):
        if len(hints) >= limit:
            break
        query = (
            sa.select(OCC.c.id, OCC.c.job_id, OCC.c.queue, OCC.c.kind, OCC.c.definition)
            .where(condition, OCC.c.cancel_requested.is_(False), st.JOB_ALLOWS_CLAIM)
            # An enqueue's priority orders the claims the hints lead to (0 otherwise).
            .order_by(OCC.c.priority.desc(), OCC.c.available_at, OCC.c.id)
            .limit(limit - len(hints))
        )
        if tx.is_postgres:
            query = query.with_for_update(skip_locked=True, of=OCC)
        hints.extend(
            DispatchHint(r.id, r.job_id, r.queue, r.kind, loads(r.definition).get("timeout"))
            for r in tx.conn.execute(query)
        )
    mark_hinted(tx, hints)
    return hints


def mark_hinted(tx: Tx, hints: list[DispatchHint]) -> None:
    """Record that ``hints`` were published now (``dispatched_at``)."""
    if hints:
        ids = [h.occurrence_id for h in hints]
        tx.conn.execute(st.MARK_HINTED, {"ids": ids, "now": tx.now})
