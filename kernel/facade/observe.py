"""The facade's reads: occurrences, events, runtime controls, counts and the watchdog's view."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from kernel import follow, reads
from kernel.facade.base import FacadeBase, ms, read, timeout_ms
from kernel.follow import EventCursor
from kernel.jobs import plan_errors
from kernel.states import ACTIVE
from kernel.transaction.tx import Tx
from kernel.types import Event, Job, Occurrence
from kernel.upkeep import blockers, canvas, watchdog
from kernel.upkeep.blockers import Blocker
from kernel.upkeep.checkup import (
    Finding,
    file_modes,
    schema_fingerprint,
    secrets_in_clear,
    unplannable,
)

__all__ = ["ObserveFacade"]


class ObserveFacade(FacadeBase):
    @read
    def get_occurrence(self, tx: Tx, occurrence_id: int) -> Occurrence:
        return reads.get_occurrence(tx, occurrence_id)

    @read
    def list_jobs(self, tx: Tx) -> list[Job]:
        return reads.list_jobs(tx)

    @read
    def list_occurrences(
        self,
        tx: Tx,
        *,
        job_id: str | None = None,
        statuses: Sequence[str] | None = None,
        limit: int = 50,
        before_id: int | None = None,
    ) -> list[Occurrence]:
        return reads.list_occurrences(
            tx,
            job_id=job_id,
            statuses=tuple(statuses) if statuses else None,
            limit=limit,
            before_id=before_id,
        )

    def active_occurrences(self, job_id: str) -> list[Occurrence]:
        """The job's occurrences running or waiting to run (:data:`kernel.states.ACTIVE`)."""
        return self.list_occurrences(job_id=job_id, statuses=ACTIVE, limit=reads.MAX_LIST)

    @read
    def events(
        self,
        tx: Tx,
        *,
        after_id: int = 0,
        job_id: str | None = None,
        occurrence_id: int | None = None,
        limit: int = 100,
        before_id: int | None = None,
        types: Sequence[str] | None = None,
        since: datetime | None = None,
    ) -> list[Event]:
        """Events after ``after_id``, oldest first; with ``before_id`` the newest below it.
        ``types`` and ``since`` keep only events of those types, at or after that instant."""
        return reads.read_events(
            tx,
            after_id=after_id,
            job_id=job_id,
            occurrence_id=occurrence_id,
            limit=limit,
            before_id=before_id,
            types=types,
            since=since,
        )

    @read
    def last_event_id(self, tx: Tx) -> int:
        """The newest event's id (0 for none)."""
        return reads.last_event_id(tx)

    @read
    def follow_events(
        self,
        tx: Tx,
        cursor: EventCursor | None = None,
        *,
        job_id: str | None = None,
        occurrence_id: int | None = None,
        types: Sequence[str] | None = None,
        since: datetime | None = None,
        limit: int = 100,
    ) -> tuple[list[Event], EventCursor]:
        """The events committed past ``cursor`` (None: from the oldest kept), oldest
        first, and the cursor to pass next: unlike ``events(after_id=...)`` it never skips
        a transaction that commits after a later id did (PostgreSQL). The one reader of
        every follower: ``events --follow``, the console's ``/live``, the exporter."""
        return follow.follow_events(
            tx,
            cursor or EventCursor(),
            job_id=job_id,
            occurrence_id=occurrence_id,
            types=types,
            since=since,
            limit=limit,
        )

    @read
    def event_cursor(self, tx: Tx) -> EventCursor:
        """A cursor past every event committed now: where a follow of new events starts."""
        return follow.cursor_now(tx)

    @read
    def runtime_controls(
        self,
        tx: Tx,
        limit: int = 200,
        *,
        statuses: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Running, pause-requested and paused occurrences, most recently changed first
        (at most 200), optionally only these ``statuses`` (``reads.RUNTIME_STATES``) and
        job ``kinds``; without payloads or lease owners."""
        return reads.runtime_controls(tx, limit, statuses, kinds)

    @read
    def status(self, tx: Tx) -> dict[str, Any]:
        """:func:`reads.status_counts`, and ``unplannable``: the enabled jobs Beat cannot
        plan (``job_id``, ``revision``, ``error``; :meth:`record_unplannable`)."""
        return {**reads.status_counts(tx), "unplannable": plan_errors.unplannable_jobs(tx)}

    @read
    def unplannable_jobs(self, tx: Tx) -> list[dict[str, Any]]:
        """The enabled jobs Beat cannot plan: ``job_id``, ``revision``, ``error``."""
        return plan_errors.unplannable_jobs(tx)

    @read
    def blocker(self, tx: Tx, occurrence_id: int) -> Blocker | None:
        """Why the occurrence is not claimable now (kind ``none``: it is), decided from the
        predicates the claim uses; None when it runs or settled. Raises NotFound."""
        return blockers.blocker(tx, occurrence_id)

    @read
    def canvas(self, tx: Tx, occurrence_id: int) -> dict[str, Any] | None:
        """The occurrence's place in a canvas (kernel/upkeep/canvas.py: its parent, step,
        chord, what its settle makes), None when it is in none. Raises NotFound."""
        return canvas.canvas(tx, occurrence_id)

    @read
    def blockers(self, tx: Tx, occurrence_ids: Sequence[int]) -> dict[int, Blocker | None]:
        """:meth:`blocker` of each occurrence found (ids not found are left out)."""
        return blockers.blockers(tx, list(occurrence_ids))

    @read
    def watchdog(
        self, tx: Tx, *, grace: float = 60.0, default_timeout: float | None = None
    ) -> dict[str, Any]:
        """Overdue firings, runs past their timeout (+ ``grace`` seconds), occurrences
        stranded (claimable for ``grace`` with nothing holding them, yet not taken) and the
        adjudication backlog; reads only. ``default_timeout``: seconds that bound a run
        whose job sets no ``timeout`` (the workers' ``kernel_default_timeout``)."""
        return watchdog.findings(tx, ms(grace, "grace"), timeout_ms(default_timeout))

    def checkup(self) -> list[Finding]:
        """What ``kernel doctor`` reports about storage: the schema's fingerprint, the
        SQLite files' modes, jobs that store secret-looking values in clear, and enabled
        jobs Beat cannot plan."""
        return [
            schema_fingerprint(self.engine),
            file_modes(self.engine),
            secrets_in_clear(self.list_jobs()),
            unplannable(self.unplannable_jobs()),
        ]
