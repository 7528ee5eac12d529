"""The facade's housekeeping: pruning history, retention passes, recording watchdog findings."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from kernel.errors import InvalidArgument
from kernel.facade.base import FacadeBase, ms, timeout_ms, write
from kernel.limits import pools
from kernel.transaction.tx import Tx
from kernel.upkeep import history, retention, watchdog

__all__ = ["UpkeepFacade"]


class UpkeepFacade(FacadeBase):
    @write
    def prune(self, tx: Tx, *, older_than: timedelta, limit: int = 10_000) -> dict[str, int]:
        """Delete settled history older than ``older_than``; unresolved work is never pruned."""
        settled_before = tx.now - int(older_than.total_seconds() * 1000)
        return history.prune(tx, settled_before=settled_before, limit=limit)

    @write
    def apply_retention(
        self, tx: Tx, ages: Mapping[str, float | None], *, limit: int = 500
    ) -> dict[str, Any]:
        """One bounded retention pass (see :mod:`kernel.upkeep.retention`).

        Args:
            ages: seconds to keep each prunable status's history (``succeeded``,
                ``cancelled``, ``skipped``); None keeps it.
            limit: at most this many occurrences and this many jobs deleted.

        Returns:
            ``occurrences``, ``events`` (pruned), ``jobs`` (ids deleted) and ``more``.
        """
        if limit < 1:
            raise InvalidArgument("limit", "must be at least 1")
        return retention.apply_retention(tx, dict(ages), limit)

    @write
    def record_watchdog(
        self, tx: Tx, *, grace: float = 60.0, default_timeout: float | None = None
    ) -> dict[str, Any]:
        """:meth:`watchdog`, appending ``watchdog_overdue`` / ``watchdog_overrun`` once per
        finding (Beat calls it periodically); ``new_events`` counts those appended."""
        return watchdog.record_findings(tx, ms(grace, "grace"), timeout_ms(default_timeout))

    @write
    def reconcile_pools(self, tx: Tx) -> list[dict[str, Any]]:
        """Correct pool counters that drifted from the slots their running occurrences
        hold (event ``pool_reconciled`` each; Beat calls it every minute).

        Returns:
            ``{"pool", "was", "running"}`` for each pool corrected.
        """
        return pools.reconcile(tx)
