"""The kernel contract suite's fixtures: every test runs on SQLite (a WAL file) and PostgreSQL.

``kernel_url`` is parametrised over both back ends; ``kernel`` opens a migrated kernel on
it with a :class:`~kernel.testing.ManualClock` (``clock``), and ``k`` bundles both with the
few helpers the tests share: define a job, fire N occurrences through the Beat path
(``Kernel.fire`` with the cursor the kernel holds), claim one; find a call's occurrences by
its task id and settle one (claimed, then succeeded or failed).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from kernel.jobs.definitions import FireReport
from kernel.store import Kernel
from kernel.testing import ManualClock
from kernel.types import Claim, Job, Occurrence

#: Spacing of the firings ``Harness.fire`` materialises, and of its cursor.
FIRE_STEP = timedelta(minutes=1)


@pytest.fixture
def clock() -> ManualClock:
    """The clock every kernel of the test reads; it moves only when the test says so."""
    return ManualClock()


@pytest.fixture
def kernel(kernel_url: str, clock: ManualClock) -> Iterator[Kernel]:
    """A migrated kernel on ``kernel_url`` driven by ``clock``; closed after the test."""
    opened = Kernel.open(kernel_url, migrate_schema=True, clock=clock)
    try:
        yield opened
    finally:
        opened.close()


@dataclass
class Harness:
    """A kernel, its clock and the steps most contract tests begin with."""

    kernel: Kernel
    clock: ManualClock
    backend: str
    url: str

    def define(self, job_id: str = "job", **fields: Any) -> Job:
        """Define a ``callable`` job; ``fields`` override the defaults.

        Overlap ``allow`` keeps occurrences independent unless a test asks otherwise;
        jitter 0 makes backoff exact.
        """
        spec: dict[str, Any] = {
            "id": job_id,
            "kind": "callable",
            "payload": {"callable": "jobs.sample:run"},
            "overlap": "allow",
            "retry": {"backoff": "10s", "factor": 2, "max": "1h", "jitter": 0},
            **fields,
        }
        job, _ = self.kernel.define_job(spec)
        return job

    @staticmethod
    def cron_key(at: datetime) -> str:
        """The trigger key of a cron firing at ``at`` (UTC text)."""
        return "cron:" + at.isoformat().replace("+00:00", "Z")

    def fire(self, job_id: str = "job", n: int = 1) -> FireReport:
        """Materialise ``n`` firings as a Beat would: from the job's cursor, one minute apart.

        The CAS uses the revision and cursor the kernel holds now, so this never goes stale.
        """
        job = self.kernel.get_job(job_id)
        start = job.next_fire_at if job.planned and job.next_fire_at else self.clock.now
        firings = [(self.cron_key(start + FIRE_STEP * i), start + FIRE_STEP * i) for i in range(n)]
        after = start + FIRE_STEP * n
        report = self.kernel.fire(
            job_id,
            expected_revision=job.revision,
            expected_cursor=job.next_trigger_key if job.planned else None,
            firings=firings,
            next_cursor=(self.cron_key(after), after),
        )
        assert not report.stale, f"fire({job_id!r}) went stale"
        return report

    def occurrences(self, job_id: str = "job", n: int = 1, **fields: Any) -> list[int]:
        """Define ``job_id`` with ``fields`` unless it exists; return ``n`` new queued occurrences.

        Fields for a job that exists would be ignored silently, so they are refused.
        """
        if job_id in {j.id for j in self.kernel.list_jobs()}:
            assert not fields, f"job {job_id!r} exists: define it with {sorted(fields)} first"
        else:
            self.define(job_id, **fields)
        created = list(self.fire(job_id, n).created)
        assert len(created) == n
        return created

    def running(
        self, job_id: str = "job", owner: str = "w1", lease: float = 30.0, **fields: Any
    ) -> Claim:
        """One new occurrence of ``job_id``, claimed by ``owner``."""
        occ_id = self.occurrences(job_id, 1, **fields)[0]
        claim = self.kernel.claim(occ_id, owner=owner, lease=lease)
        assert claim is not None
        return claim

    def keyed(self, task_id: str) -> list[Occurrence]:
        """The occurrences a call made under Celery's task id ``task_id`` (its key)."""
        key = f"key:{task_id}"
        return [o for o in self.kernel.list_occurrences(limit=500) if o.trigger_key == key]

    def succeed(self, occurrence_id: int, result: Any) -> None:
        """Claim the occurrence and settle it succeeded with ``result``."""
        claim = self.kernel.claim(occurrence_id, owner="w1", lease=30)
        assert claim is not None
        self.kernel.succeed(occurrence_id, owner="w1", fence=claim.fence, result=result)

    def fail(self, occurrence_id: int, *, retryable: bool = True) -> str:
        """Claim the occurrence and settle it failed (code ``E``); the status it took."""
        claim = self.kernel.claim(occurrence_id, owner="w1", lease=30)
        assert claim is not None
        return self.kernel.fail(
            occurrence_id, owner="w1", fence=claim.fence, code="E", message="x", retryable=retryable
        )

    def event_types(self, occurrence_id: int) -> list[str]:
        """The types of an occurrence's events, in order."""
        return [e.type for e in self.kernel.events(occurrence_id=occurrence_id, limit=1000)]


@pytest.fixture
def k(kernel: Kernel, clock: ManualClock, kernel_url: str) -> Harness:
    """The kernel under test, its clock and shared helpers."""
    backend = "postgres" if kernel_url.startswith("postgresql") else "sqlite"
    return Harness(kernel=kernel, clock=clock, backend=backend, url=kernel_url)
