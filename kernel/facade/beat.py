"""The facade's Beat side: due jobs, firing, dispatch hints, lease expiry, start deadlines,
the Beat registry."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from kernel.facade.base import FacadeBase, ms, read, write
from kernel.jobs import definitions as job_ops
from kernel.jobs import plan_errors
from kernel.occurrences import dispatch, lease_expiry
from kernel.records import from_dt
from kernel.transaction.tx import Tx
from kernel.types import Beat, DispatchHint, Job
from kernel.upkeep import beats

__all__ = ["BeatFacade"]


class BeatFacade(FacadeBase):
    @read
    def due_jobs(self, tx: Tx, limit: int = 500) -> list[Job]:
        """Jobs whose cursor is due now, and jobs not planned yet."""
        return job_ops.due_jobs(tx, limit)

    @write
    def fire(
        self,
        tx: Tx,
        job_id: str,
        *,
        expected_revision: int,
        expected_cursor: str | None,
        firings: Sequence[tuple[str, datetime]] = (),
        missed: Sequence[tuple[str, datetime]] = (),
        missed_reason: str | None = None,
        missed_count: int | None = None,
        next_cursor: tuple[str, datetime] | None,
    ) -> job_ops.FireReport:
        """Advance a job's fire cursor by CAS and materialise the firings it passed.

        ``firings`` and ``missed`` are (trigger key, instant) pairs (:class:`~kernel.types.Firing`,
        as Beat plans them, or plain tuples), as is ``next_cursor``; missed ones are
        recorded as skipped with ``missed_reason``. ``missed_count`` (default: as many
        as ``missed``) is how many were missed in all, when ``missed`` lists only the
        oldest; event ``firings_missed`` records it. A stale caller changes nothing.
        """
        return job_ops.fire(
            tx,
            job_id,
            expected_revision=expected_revision,
            expected_cursor=expected_cursor,
            firings=[(k, from_dt(at)) for k, at in firings],
            missed=[(k, from_dt(at)) for k, at in missed],
            missed_reason=missed_reason,
            missed_count=len(missed) if missed_count is None else missed_count,
            next_cursor=(next_cursor[0], from_dt(next_cursor[1])) if next_cursor else None,
        )

    @write
    def record_unplannable(self, tx: Tx, job_id: str, *, revision: int, error: str) -> bool:
        """Record that Beat cannot plan (or fire) ``job_id`` at ``revision``: ``error`` on
        its row and event ``job_unplannable``, once per revision (``kernel status`` and
        ``kernel doctor`` list it until the revision fires or a new one replaces it).

        Returns:
            True when recorded now; False when the job moved on or the revision already
            holds an error.
        """
        return plan_errors.mark_unplannable(tx, job_id, revision, error)

    @write
    def dispatch_batch(
        self, tx: Tx, *, limit: int = 200, rehint_after: float = 30.0
    ) -> list[DispatchHint]:
        """Occurrences to publish a hint for; marks them hinted (SPEC §2.3)."""
        return dispatch.dispatch_batch(tx, limit=limit, rehint_after_ms=int(rehint_after * 1000))

    @write
    def expire_leases(self, tx: Tx, limit: int = 200) -> dict[str, int]:
        return lease_expiry.expire_leases(tx, limit)

    @write
    def skip_expired(self, tx: Tx, limit: int = 200) -> int:
        """Settle skipped ``expired`` up to ``limit`` waiting occurrences whose start
        deadline (``expires``) passed, with their events: how many."""
        return lease_expiry.skip_expired(tx, limit=limit)

    @write
    def record_beat(self, tx: Tx, beat_id: str, *, host: str, interval: float) -> None:
        beats.record_beat(tx, beat_id, host, interval)

    @read
    def beats(self, tx: Tx) -> list[Beat]:
        return beats.list_beats(tx)

    @write
    def deregister_beat(self, tx: Tx, beat_id: str) -> bool:
        """Remove a Beat that stops cleanly (event ``beat_stopped``); False if unknown."""
        return beats.deregister_beat(tx, beat_id)

    @write
    def forget_silent_beats(self, tx: Tx, *, silent_for: float) -> list[str]:
        """Remove Beats silent for more than ``silent_for`` seconds (event ``beat_forgotten``).

        Returns:
            The ids of the Beats removed.
        """
        return beats.forget_silent_beats(tx, ms(silent_for, "silent_for"))
