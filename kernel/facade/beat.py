"""The facade's Beat side: due jobs, firing, dispatch hints, lease expiry, the Beat registry."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from kernel import beats, dispatch, runs
from kernel import jobs as job_ops
from kernel.facade.base import FacadeBase, ms
from kernel.records import from_dt
from kernel.types import Beat, DispatchHint, Job

__all__ = ["BeatFacade"]


class BeatFacade(FacadeBase):
    def due_jobs(self, limit: int = 500) -> list[Job]:
        """Jobs whose cursor is due now, and jobs not planned yet."""
        return self._read(job_ops.due_jobs, limit)

    def fire(
        self,
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

        ``firings`` and ``missed`` are (trigger key, instant) pairs; missed ones are
        recorded as skipped with ``missed_reason``. ``missed_count`` (default: as many
        as ``missed``) is how many were missed in all, when ``missed`` lists only the
        oldest; event ``firings_missed`` records it. A stale caller changes nothing.
        """
        return self._write(
            job_ops.fire,
            job_id,
            expected_revision=expected_revision,
            expected_cursor=expected_cursor,
            firings=[(k, from_dt(at)) for k, at in firings],
            missed=[(k, from_dt(at)) for k, at in missed],
            missed_reason=missed_reason,
            missed_count=len(missed) if missed_count is None else missed_count,
            next_cursor=(next_cursor[0], from_dt(next_cursor[1])) if next_cursor else None,
        )

    def dispatch_batch(self, *, limit: int = 200, rehint_after: float = 30.0) -> list[DispatchHint]:
        """Occurrences to publish a hint for; marks them hinted (SPEC §2.3)."""
        return self._write(
            dispatch.dispatch_batch, limit=limit, rehint_after_ms=int(rehint_after * 1000)
        )

    def expire_leases(self, limit: int = 200) -> dict[str, int]:
        return self._write(runs.expire_leases, limit)

    def record_beat(self, beat_id: str, *, host: str, interval: float) -> None:
        self._write(beats.record_beat, beat_id, host, interval)

    def beats(self) -> list[Beat]:
        return self._read(beats.list_beats)

    def deregister_beat(self, beat_id: str) -> bool:
        """Remove a Beat that stops cleanly (event ``beat_stopped``); False if unknown."""
        return self._write(beats.deregister_beat, beat_id)

    def forget_silent_beats(self, *, silent_for: float) -> list[str]:
        """Remove Beats silent for more than ``silent_for`` seconds (event ``beat_forgotten``).

        Returns:
            The ids of the Beats removed.
        """
        return self._write(beats.forget_silent_beats, ms(silent_for, "silent_for"))
