"""Pruning settled history; unresolved work (dead letters, adjudications) is never pruned."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from kernel.events import EventType
from kernel.schema import (
    adjudication_asks,
    budget_reservations,
    controls,
    events,
    notifications,
    occurrences,
    operator_requests,
    requeue_grants,
)
from kernel.states import RESOLVED, OccurrenceStatus
from kernel.tx import Tx

__all__ = ["PRUNABLE", "forget", "prune"]

S = OccurrenceStatus
OCC = occurrences
#: Final and resolved: the statuses whose history may go (dead letters and
#: adjudications are unresolved and stay).
PRUNABLE: tuple[str, ...] = RESOLVED


def forget(tx: Tx, ids: Sequence[int], *, requests_before: int) -> int:
    """Delete what belongs to the occurrences ``ids`` (being deleted in ``tx``): controls,
    grants, asks, reservations, notifications, events, and operator requests made before
    ``requests_before``. Returns how many events went."""
    for table, column in (
        (controls, controls.c.occurrence_id),
        (requeue_grants, requeue_grants.c.occurrence_id),
        (adjudication_asks, adjudication_asks.c.occurrence_id),
        # the window's counters keep what it counted; the row only named the occurrence
        (budget_reservations, budget_reservations.c.occurrence_id),
        (notifications, notifications.c.occurrence_id),
    ):
        tx.conn.execute(sa.delete(table).where(column.in_(ids)))
    pruned_events = tx.conn.execute(
        sa.delete(events).where(events.c.occurrence_id.in_(ids))
    ).rowcount
    tx.conn.execute(
        sa.delete(operator_requests).where(
            operator_requests.c.created_at < requests_before,
            operator_requests.c.target.in_([str(i) for i in ids]),
        )
    )
    return int(pruned_events)


def prune(
    tx: Tx, *, settled_before: int, limit: int, statuses: tuple[str, ...] = PRUNABLE
) -> dict[str, int]:
    """Delete history of ``statuses`` (some of PRUNABLE) settled before ``settled_before``."""
    ids = (
        tx.conn.execute(
            sa.select(OCC.c.id)
            .where(
                OCC.c.status.in_([s for s in statuses if s in PRUNABLE]),
                OCC.c.settled_at < settled_before,
            )
            .order_by(OCC.c.settled_at)
            .limit(limit)
        )
        .scalars()
        .all()
    )
    if not ids:
        return {"occurrences": 0, "events": 0}
    pruned_events = forget(tx, ids, requests_before=settled_before)
    pruned = tx.conn.execute(sa.delete(OCC).where(OCC.c.id.in_(ids))).rowcount
    tx.emit(
        EventType.HISTORY_PRUNED,
        occurrences=pruned,
        events=pruned_events,
        settled_before=settled_before,
        statuses=list(statuses),
    )
    return {"occurrences": pruned, "events": pruned_events}
