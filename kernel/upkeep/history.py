"""Pruning settled history; unresolved work (dead letters, adjudications) is never pruned."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from kernel import statements as st
from kernel.db.schema import occurrences
from kernel.events import EventType
from kernel.states import RESOLVED
from kernel.transaction.tx import Tx

__all__ = ["PRUNABLE", "forget", "prune"]

OCC = occurrences
#: Final and resolved: the statuses whose history may go (dead letters and
#: adjudications are unresolved and stay).
PRUNABLE: tuple[str, ...] = RESOLVED


def forget(tx: Tx, ids: Sequence[int], *, requests_before: int) -> int:
    """Delete what belongs to the occurrences ``ids`` (being deleted in ``tx``): controls,
    grants, asks, reservations, notifications, events, and operator requests made before
    ``requests_before``. Returns how many events went."""
    params = {"occurrence_ids": list(ids)}
    for statement in st.FORGET_OCCURRENCE_ROWS:
        tx.conn.execute(statement, params)
    pruned_events = tx.conn.execute(st.FORGET_OCCURRENCE_EVENTS, params).rowcount
    tx.conn.execute(
        st.FORGET_OCCURRENCE_REQUESTS,
        {"requests_before": requests_before, "targets": [str(i) for i in ids]},
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
    pruned = tx.conn.execute(st.DELETE_OCCURRENCES, {"occurrence_ids": ids}).rowcount
    tx.emit(
        EventType.HISTORY_PRUNED,
        occurrences=pruned,
        events=pruned_events,
        settled_before=settled_before,
        statuses=list(statuses),
    )
    return {"occurrences": pruned, "events": pruned_events}
