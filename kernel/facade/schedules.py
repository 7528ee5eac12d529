"""The facade's schedule extras: backfills over a range, and fan-in jobs judged by Beat."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from kernel.facade.base import FacadeBase, read, write
from kernel.jobs import backfill as backfill_ops
from kernel.jobs import fan_in
from kernel.records import from_dt
from kernel.transaction.tx import Tx

__all__ = ["ScheduleFacade"]


class ScheduleFacade(FacadeBase):
    @write
    def backfill(
        self,
        tx: Tx,
        job_id: str,
        *,
        expected_revision: int,
        firings: Sequence[tuple[str, datetime]],
        operator: str,
        params: dict[str, Any] | None = None,
        sequential: bool = False,
        summary: dict[str, Any] | None = None,
    ) -> backfill_ops.BackfillReport:
        """Make an occurrence of each planned ``(trigger key, due time)`` not made yet.

        Admitted by the job's overlap policy and ``max_queued`` (a refused firing is
        recorded skipped), or with ``sequential`` queued as exclusive runs in firing
        order. ``params`` are merged into each new occurrence's payload only. One
        transaction; event ``job_backfilled`` (with ``summary``).

        Raises:
            NotFound: no such job.
            RevisionConflict: the job is no longer at ``expected_revision``.
            InvalidArgument: ``params``, or the payload they make.
        """
        return backfill_ops.backfill(
            tx,
            job_id,
            expected_revision=expected_revision,
            firings=[(key, from_dt(at)) for key, at in firings],
            params=params,
            sequential=sequential,
            operator=operator,
            summary=summary or {},
        )

    @read
    def existing_firings(self, tx: Tx, job_id: str, trigger_keys: Sequence[str]) -> dict[str, int]:
        """Which of ``trigger_keys`` the job has an occurrence of: trigger key -> its id."""
        return backfill_ops.existing_firings(tx, job_id, list(trigger_keys))

    @write
    def judge_fan_ins(self, tx: Tx) -> fan_in.FanInReport:
        """Beat's fan-in pass: for each enabled fan-in job (``after.all``), make an
        occurrence for each logical firing all its parents succeeded for within
        ``after.within``, or record it skipped (``fan_in_timeout``,
        ``fan_in_parent_failed``). One transaction; each instant is decided once."""
        return fan_in.judge_fan_ins(tx)
