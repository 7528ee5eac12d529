"""The facade's part for job health: how each job is doing."""

from __future__ import annotations

from kernel import job_health
from kernel.facade.base import FacadeBase
from kernel.types import JobHealth

__all__ = ["HealthFacade"]


class HealthFacade(FacadeBase):
    def job_health(self, job_id: str | None = None) -> dict[str, JobHealth]:
        """Last success, last failure, consecutive failures and next firing of every job
        (or only ``job_id``; an unknown id gives an empty answer), by job id; one query."""
        return self._read(job_health.job_health, job_id)
