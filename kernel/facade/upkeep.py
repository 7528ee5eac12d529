"""The facade's housekeeping: pruning history, retention passes, recording watchdog findings."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, TypeVar

from kernel.errors import InvalidArgument
from kernel.facade.base import FacadeBase, ms, timeout_ms, write
from kernel.limits import pools
from kernel.transaction.tx import Tx
from kernel.upkeep import history, retention, watchdog

T = TypeVar("T")

__all__ = ["UpkeepFacade"]


class UpkeepFacade(FacadeBase):
    def prune(self, *, older_than: timedelta, limit: int = 10_000) -> dict[str, int]:
        """Delete settled history older than ``older_than``, at most ``limit`` occurrences,
        in short steps (:meth:`_stepped`); unresolved work is never pruned."""
        age_ms = int(older_than.total_seconds() * 1000)
        return self._stepped(
            lambda tx, n: history.prune(tx, settled_before=tx.now - age_ms, limit=n), limit
        )

    def apply_retention(
        self, ages: Mapping[str, float | None], *, limit: int = 500
    ) -> dict[str, Any]:
        """One bounded retention pass (see :mod:`kernel.upkeep.retention`): the history in
        short steps (:meth:`_stepped`), then the finished jobs in one transaction.

        Args:
            ages: seconds to keep each prunable status's history (``succeeded``,
                ``cancelled``, ``skipped``); None keeps it.
            limit: at most this many occurrences and this many jobs deleted.

        Returns:
            ``occurrences``, ``events`` (pruned), ``jobs`` (ids deleted),
            ``budget_windows`` (pruned) and ``more``: a bound was hit, so another pass
            has work.
        """
        if limit < 1:
            raise InvalidArgument("limit", "must be at least 1")
        kept = retention.checked_ages(ages)
        pruned = self._stepped(lambda tx, n: retention.prune_history(tx, kept, n), limit)
        rest = self._paced(retention.expire, limit)[0]
        more = (
            pruned["occurrences"] >= limit
            or len(rest["jobs"]) >= limit
            or rest["budget_windows"] >= limit
        )
        return {**pruned, **rest, "more": more}

    def _stepped(self, step: Callable[[Tx, int], dict[str, int]], limit: int) -> dict[str, int]:
        """``step(tx, n)`` (delete at most ``n`` occurrences, say how many and their events)
        up to ``limit`` occurrences in all.

        On SQLite, whose one writer lock a claim or settle queues behind, in short
        transactions (``history.next_step`` sizes each by what the last one cost) until a
        step finds fewer than it may delete, each paced (:meth:`_paced`). On PostgreSQL no
        claim waits for the prune (it locks only settled rows, which nobody claims), while
        each step's commit would cost a durable flush: one transaction, paced.
        """
        if self.dialect != "sqlite":
            return self._paced(step, limit)[0]
        total = {"occurrences": 0, "events": 0}
        size = min(limit, history.FIRST_STEP)
        while True:
            done, statements_s, held_s = self._paced(step, size)
            total = {key: total[key] + done[key] for key in total}
            left = limit - total["occurrences"]
            if done["occurrences"] < size or left <= 0:
                return total
            commit_s = held_s - statements_s
            size = history.next_step(done["occurrences"], statements_s, commit_s, left)

    def _paced(self, work: Callable[[Tx, int], T], n: int) -> tuple[T, float, float]:
        """``work(tx, n)`` in a transaction of its own; what it returned, how long its statements
        took and how long it held the lock (from its first statement to its commit).

        The pruner then waits as long as it held the lock: on SQLite so the writers queued
        behind it go first instead of racing a pruner that takes the lock straight back
        (after every step, the last of a pass too, and after the pass's end: else a pass's
        last step, its end and the next pass's first step held it back to back); on
        PostgreSQL, where nothing waits for its locks, so that its passes take at most
        about half of the time, leaving the CPU and the WAL's flushes to the claims (back
        to back they took the two cores: bench/README.md session 22). On SQLite the step
        commits without checkpointing the WAL and the pruner checkpoints after it, outside
        the writer gate."""
        started = ended = 0.0
        deferred: tuple[Any, int] | None = None

        def run(tx: Tx) -> T:
            nonlocal started, ended, deferred
            if self.dialect == "sqlite":
                deferred = history.checkpoints_deferred(tx.conn)
            started = time.perf_counter()
            done = work(tx, n)
            ended = time.perf_counter()
            return done

        try:
            done = self._session.run(run)
        finally:
            if deferred is not None:
                history.restore_checkpoints(*deferred)
        held_s = time.perf_counter() - started
        if deferred is not None:
            history.checkpoint(self._session.engine)
        time.sleep(held_s)
        return done, ended - started, held_s

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
