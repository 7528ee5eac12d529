"""The facade's reads: occurrences, events, runtime controls, counts and the watchdog's view."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from kernel import reads, watchdog
from kernel.checkup import Finding, file_modes, schema_fingerprint, secrets_in_clear
from kernel.facade.base import FacadeBase, ms
from kernel.types import Event, Occurrence

__all__ = ["ObserveFacade"]


class ObserveFacade(FacadeBase):
    def get_occurrence(self, occurrence_id: int) -> Occurrence:
        return self._read(reads.get_occurrence, occurrence_id)

    def list_occurrences(
        self,
        *,
        job_id: str | None = None,
        statuses: Sequence[str] | None = None,
        limit: int = 50,
        before_id: int | None = None,
    ) -> list[Occurrence]:
        return self._read(
            reads.list_occurrences,
            job_id=job_id,
            statuses=tuple(statuses) if statuses else None,
            limit=limit,
            before_id=before_id,
        )

    def active_occurrences(self, job_id: str) -> list[Occurrence]:
        return self.list_occurrences(
            job_id=job_id, statuses=("queued", "running", "retry_wait"), limit=reads.MAX_LIST
        )

    def events(
        self,
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
        return self._read(
            reads.read_events,
            after_id=after_id,
            job_id=job_id,
            occurrence_id=occurrence_id,
            limit=limit,
            before_id=before_id,
            types=types,
            since=since,
        )

    def last_event_id(self) -> int:
        """The newest event's id (0 for none): where ``events --follow`` starts."""
        return self._read(reads.last_event_id)

    def runtime_controls(
        self,
        limit: int = 200,
        *,
        statuses: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Running, pause-requested and paused occurrences, most recently changed first
        (at most 200), optionally only these ``statuses`` (``reads.RUNTIME_STATES``) and
        job ``kinds``; without payloads or lease owners."""
        return self._read(reads.runtime_controls, limit, statuses, kinds)

    def status(self) -> dict[str, Any]:
        return self._read(reads.status_counts)

    def watchdog(self, *, grace: float = 60.0) -> dict[str, Any]:
        """Overdue firings, runs past their timeout (+ ``grace`` seconds) and the
        adjudication backlog; reads only."""
        return self._read(watchdog.findings, ms(grace, "grace"))

    def checkup(self) -> list[Finding]:
        """What ``kernel doctor`` reports about storage: the schema's fingerprint, the
        SQLite files' modes, and jobs that store secret-looking values in clear."""
        return [
            schema_fingerprint(self.engine),
            file_modes(self.engine),
            secrets_in_clear(self._read(reads.list_jobs)),
        ]
