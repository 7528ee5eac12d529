"""The dispatch pump's side: which occurrences to hint, marked hinted in the same write."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from kernel import statements as st
from kernel.records import loads
from kernel.transaction.tx import Tx
from kernel.types import DispatchHint

__all__ = ["dispatch_batch", "mark_hinted"]


def dispatch_batch(tx: Tx, *, limit: int, rehint_after_ms: int) -> list[DispatchHint]:
    """Claimable occurrences not hinted recently, marked hinted now by the statement that
    finds them (SPEC §2.3), in the order their claims should go: claimable ones by
    priority, then expired leases."""
    rows = tx.all_alone(
        st.HINT[tx.dialect],
        {"now": tx.now, "rehint_before": tx.now - rehint_after_ms, "limit": limit},
    )
    rows.sort(key=lambda r: (r.status == "running", -r.priority, r.available_at, r.id))
    return [
        DispatchHint(
            r.id, r.job_id, r.queue, r.kind, *_hinted(r.definition), r.priority, r.trigger_key
        )
        for r in rows
    ]


@lru_cache(maxsize=256)
def _hinted(definition: str) -> tuple[float | None, dict[str, Any] | None]:
    """The definition's ``timeout`` and ``payload``, parsed once per definition text (the
    pump hints the same few definitions over and over)."""
    spec = loads(definition)
    return spec.get("timeout"), spec.get("payload")


def mark_hinted(tx: Tx, hints: list[DispatchHint]) -> None:
    """Record that ``hints`` were published now (``dispatched_at``)."""
    if hints:
        ids = [h.occurrence_id for h in hints]
        tx.conn.execute(st.MARK_HINTED, {"ids": ids, "now": tx.now})
