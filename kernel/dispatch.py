"""The dispatch pump's side: which occurrences to hint, marked hinted in the same write."""

from __future__ import annotations

from kernel import statements as st
from kernel.records import loads
from kernel.tx import Tx
from kernel.types import DispatchHint

__all__ = ["dispatch_batch", "mark_hinted"]


def dispatch_batch(tx: Tx, *, limit: int, rehint_after_ms: int) -> list[DispatchHint]:
    """Claimable occurrences not hinted recently; marks them hinted now (SPEC §2.3)."""
    hints: list[DispatchHint] = []
    for query in st.HINT_CANDIDATES[tx.dialect].values():
        if len(hints) >= limit:
            break
        params = {
            "now": tx.now,
            "rehint_before": tx.now - rehint_after_ms,
            "limit": limit - len(hints),
        }
        hints.extend(
            DispatchHint(r.id, r.job_id, r.queue, r.kind, loads(r.definition).get("timeout"))
            for r in tx.conn.execute(query, params)
        )
    mark_hinted(tx, hints)
    return hints


def mark_hinted(tx: Tx, hints: list[DispatchHint]) -> None:
    """Record that ``hints`` were published now (``dispatched_at``)."""
    if hints:
        ids = [h.occurrence_id for h in hints]
        tx.conn.execute(st.MARK_HINTED, {"ids": ids, "now": tx.now})
