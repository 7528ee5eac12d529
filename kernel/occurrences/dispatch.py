"""The dispatch pump's side: which occurrences to hint, marked hinted in the same write."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from kernel import statements as st
from kernel.records import loads
from kernel.transaction.tx import Tx
from kernel.types import DispatchHint

__all__ = ["dispatch_batch", "hint_made", "mark_hinted"]


def dispatch_batch(tx: Tx, *, limit: int, rehint_after_ms: int) -> list[DispatchHint]:
    """Claimable occurrences not hinted recently, marked hinted now by the statement that
    finds them (SPEC §2.3), in the order their claims should go: claimable ones by
    priority, then expired leases."""
    rows = tx.all_alone(
        st.HINT[tx.dialect],
        {"now": tx.now, "rehint_before": tx.now - rehint_after_ms, "limit": limit},
    )
    return _hints(rows)


def hint_made(tx: Tx) -> list[DispatchHint]:
    """Of the runs this transaction made (``Tx.made_runs``: a settle's chain step, chord
    body, errback, replacement), those the pump would hint now, marked hinted in it: the
    maker publishes them once it commits, so a chain goes on without waiting for a Beat
    tick (one it could not publish, the pump hints after its rehint interval)."""
    if not tx.made_runs:
        return []
    rows = tx.conn.execute(
        st.HINT_MADE, {"ids": tx.made_runs, "now": tx.now, "rehint_before": tx.now}
    ).all()
    return _hints(rows)


def _hints(rows: Sequence[Any]) -> list[DispatchHint]:
    """The hints of the rows HINT or HINT_MADE marked, in the order their claims should go."""
    ordered = sorted(rows, key=lambda r: (r.status == "running", -r.priority, r.available_at, r.id))
    return [
        DispatchHint(
            r.id, r.job_id, r.queue, r.kind, *_hinted(r.definition), r.priority, r.trigger_key
        )
        for r in ordered
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
