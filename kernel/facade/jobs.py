"""The facade's job definitions: define, revise, apply, enable, delete, cancel, sources."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kernel import budgets, cancellation, reads, sources
from kernel import jobs as job_ops
from kernel import pools as pool_ops
from kernel.cancellation import JobCancel
from kernel.facade.base import FacadeBase
from kernel.facade.gates import checked_budgets
from kernel.spec.sections import Budget
from kernel.tx import Tx
from kernel.types import Job

__all__ = ["JobFacade"]


class JobFacade(FacadeBase):
    def define_job(
        self, spec: Mapping[str, Any], *, operator: str | None = None
    ) -> tuple[Job, bool]:
        """Create a job. Returns (job, created); identical content again is a no-op.

        ``operator`` (here and in the other definition changes) is recorded in the
        event as who made the change, when given.

        Raises:
            InvalidArgument: a field is invalid (``field`` names it).
            StateConflict: the id exists with other content.
        """
        return self._write(job_ops.define_job, spec, operator)

    def revise_job(
        self, spec: Mapping[str, Any], *, expected_revision: int, operator: str | None = None
    ) -> tuple[Job, bool]:
        """Replace a definition by CAS on its revision. Raises RevisionConflict when stale."""
        return self._write(job_ops.revise_job, spec, expected_revision, operator)

    def apply_job(self, spec: Mapping[str, Any], *, operator: str | None = None) -> tuple[Job, str]:
        """Upsert: ``created``, ``updated`` (revision + 1) or ``unchanged``."""
        return self._write(job_ops.apply_job, spec, operator)

    def apply_jobs(
        self,
        specs: Sequence[Mapping[str, Any]],
        *,
        operator: str | None = None,
        shared_budgets: Mapping[str, Mapping[str, Any] | Budget] | None = None,
        pools: Mapping[str, int] | None = None,
    ) -> list[tuple[Job, str]]:
        """Apply every spec in one transaction; any refusal leaves the kernel unchanged.

        A job file's ``pools:`` limits and ``shared_budgets`` (its ``budgets:``) are set
        first, so its jobs may name them.
        """

        def run(tx: Tx) -> list[tuple[Job, str]]:
            for name, limit in sorted((pools or {}).items()):
                pool_ops.set_limit(tx, name, limit)
            if shared_budgets:
                budgets.set_budgets(tx, checked_budgets(shared_budgets))
            return job_ops.apply_jobs(tx, list(specs), operator)

        return self._write(run)

    def set_job_enabled(
        self, job_id: str, enabled: bool, *, operator: str | None = None
    ) -> tuple[Job, bool]:
        return self._write(job_ops.set_enabled, job_id, enabled, operator)

    def delete_job(self, job_id: str, *, operator: str | None = None) -> None:
        """Raises StateConflict while the job has unsettled occurrences."""
        self._write(job_ops.delete_job, job_id, operator)

    def get_job(self, job_id: str) -> Job:
        return self._read(job_ops.get_job, job_id)

    def list_jobs(self) -> list[Job]:
        return self._read(reads.list_jobs)

    def cancel_job(
        self, job_id: str, *, cascade: bool = False, request_id: str, operator: str
    ) -> JobCancel:
        """Disable a job, cancel its waiting occurrences and ask its running ones to stop;
        ``cascade``: the same for every job chained after it. Idempotent by request id.

        Raises:
            NotFound: no such job.
            EvidenceConflict: the request id was used for something else.
        """
        return self._write(
            cancellation.cancel_job,
            job_id,
            cascade=cascade,
            request_id=request_id,
            operator=operator,
        )

    def sync_job_source(self, source: str, owned: Mapping[str, str]) -> sources.SourceSync:
        """Record that ``source`` defines exactly ``owned`` (job id -> entry name): jobs it
        no longer lists are disabled (``job_retired``), retired ones listed again enabled."""
        return self._write(sources.sync_source, source, owned)
