"""The facade's job definitions: define, revise, apply, enable, delete, cancel, sources."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kernel.facade.base import FacadeBase, read, write
from kernel.facade.gates import checked_budgets
from kernel.jobs import cancellation, sources
from kernel.jobs import definitions as job_ops
from kernel.jobs.cancellation import JobCancel
from kernel.limits import budgets
from kernel.limits import pools as pool_ops
from kernel.spec.sections import Budget
from kernel.transaction.tx import Tx
from kernel.types import Job

__all__ = ["JobFacade"]


class JobFacade(FacadeBase):
    @write
    def define_job(
        self, tx: Tx, spec: Mapping[str, Any], *, operator: str | None = None
    ) -> tuple[Job, bool]:
        """Create a job. Returns (job, created); identical content again is a no-op.

        ``operator`` (here and in the other definition changes) is recorded in the
        event as who made the change, when given.

        Raises:
            InvalidArgument: a field is invalid (``field`` names it).
            StateConflict: the id exists with other content.
        """
        return job_ops.define_job(tx, spec, operator)

    @write
    def revise_job(
        self,
        tx: Tx,
        spec: Mapping[str, Any],
        *,
        expected_revision: int,
        operator: str | None = None,
    ) -> tuple[Job, bool]:
        """Replace a definition by CAS on its revision. Raises RevisionConflict when stale."""
        return job_ops.revise_job(tx, spec, expected_revision, operator)

    @write
    def apply_job(
        self, tx: Tx, spec: Mapping[str, Any], *, operator: str | None = None
    ) -> tuple[Job, str]:
        """Upsert: ``created``, ``updated`` (revision + 1) or ``unchanged``."""
        return job_ops.apply_job(tx, spec, operator)

    @write
    def apply_jobs(
        self,
        tx: Tx,
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
        for name, limit in sorted((pools or {}).items()):
            pool_ops.set_limit(tx, name, limit)
        if shared_budgets:
            budgets.set_budgets(tx, checked_budgets(shared_budgets))
        return job_ops.apply_jobs(tx, list(specs), operator)

    @write
    def set_job_enabled(
        self, tx: Tx, job_id: str, enabled: bool, *, operator: str | None = None
    ) -> tuple[Job, bool]:
        return job_ops.set_enabled(tx, job_id, enabled, operator)

    @write
    def delete_job(self, tx: Tx, job_id: str, *, operator: str | None = None) -> None:
        """Raises StateConflict while the job has unsettled occurrences."""
        job_ops.delete_job(tx, job_id, operator)

    @read
    def get_job(self, tx: Tx, job_id: str) -> Job:
        return job_ops.get_job(tx, job_id)

    @write
    def cancel_job(
        self, tx: Tx, job_id: str, *, cascade: bool = False, request_id: str, operator: str
    ) -> JobCancel:
        """Disable a job, cancel its waiting occurrences and ask its running ones to stop;
        ``cascade``: the same for every job chained after it. Idempotent by request id.

        Raises:
            NotFound: no such job.
            EvidenceConflict: the request id was used for something else.
        """
        return cancellation.cancel_job(
            tx, job_id, cascade=cascade, request_id=request_id, operator=operator
        )

    @write
    def sync_job_source(self, tx: Tx, source: str, owned: Mapping[str, str]) -> sources.SourceSync:
        """Record that ``source`` defines exactly ``owned`` (job id -> entry name): jobs it
        no longer lists are disabled (``job_retired``), retired ones listed again enabled."""
        return sources.sync_source(tx, source, owned)
