"""Beat's harness: the KernelScheduler Celery builds from ``beat_scheduler``, on a kernel
whose clock moves only when a test says so.

The scheduler is made the way ``celery beat`` makes it (``celery.beat.Service``
with the app from :func:`celery_app.factory.create_app`), which opens the kernel at
``KERNEL_DATABASE_URL`` and migrates it. The harness then swaps in a kernel on the same
database driven by a :class:`~kernel.testing.ManualClock`, so a "tick at 12:05" is a
whole Beat tick (heartbeat, lease expiry, materialise, pump to the embedded broker in
the test's directory) at that simulated instant.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from celery.beat import Service

from celery_app.beat import KernelScheduler
from celery_app.factory import create_app
from kernel import Job, Kernel, Occurrence
from kernel.testing import ManualClock

#: 12:00 on a plain Monday; the clock starts half a minute later.
NOON = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


@dataclass
class Beat:
    """A KernelScheduler, the kernel it ticks on, and that kernel's clock (at 12:00:30)."""

    scheduler: KernelScheduler
    kernel: Kernel
    clock: ManualClock
    caplog: pytest.LogCaptureFixture

    @staticmethod
    def minute(n: float) -> datetime:
        """``n`` minutes after 12:00 (UTC) of the test day."""
        return NOON + timedelta(minutes=n)

    @staticmethod
    def key(n: int, kind: str = "every") -> str:
        """The trigger key of the firing ``n`` minutes after 12:00."""
        return f"{kind}:{Beat.minute(n).strftime('%Y-%m-%dT%H:%M:%S')}Z"

    def define(self, job_id: str = "job", **fields: Any) -> Job:
        """Define an every-minute ``task`` job; ``fields`` override any spec field."""
        spec = {
            "id": job_id,
            "kind": "task",
            "payload": {"task": "tests.noop"},
            "schedule": {"every": 60},
            **fields,
        }
        job, _ = self.kernel.define_job(spec)
        return job

    def tick(self, at: datetime | None = None) -> None:
        """One whole Beat tick, at ``at`` if given; fails on any step Beat logged as failed."""
        if at is not None:
            self.clock.set(at)
        self.caplog.clear()
        self.scheduler.tick()
        failed = [
            r.getMessage()
            for r in self.caplog.records
            if getattr(r, "action", None) in ("tick_step_failed", "materialise_failed")
        ]
        assert not failed, failed

    def occurrences(self, job_id: str = "job", status: str | None = None) -> list[Occurrence]:
        """The job's occurrences by scheduled time (optionally of one status)."""
        found = self.kernel.list_occurrences(
            job_id=job_id, statuses=[status] if status else None, limit=500
        )
        return sorted(found, key=lambda o: (o.scheduled_for, o.id))

    def keys(self, job_id: str = "job", status: str | None = None) -> list[str]:
        """Trigger keys of :meth:`occurrences`."""
        return [o.trigger_key for o in self.occurrences(job_id, status)]

    def skips(self, job_id: str = "job") -> dict[str, str | None]:
        """Skipped firings: trigger key -> skip reason."""
        return {o.trigger_key: o.skip_reason for o in self.occurrences(job_id, "skipped")}


@pytest.fixture
def open_beat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> Iterator[Callable[..., Beat]]:
    """Build a :class:`Beat` on a database URL: ``open_beat(url, beat_schedule={...})``."""
    # The embedded broker's folders are made relative to the working directory.
    monkeypatch.chdir(tmp_path)
    for name in ("CELERY_BROKER_URL", "CELERY_CONFIG_MODULE", "KERNEL_JOBS_FILE"):
        monkeypatch.delenv(name, raising=False)
    opened: list[KernelScheduler] = []

    def build(url: str, **conf: Any) -> Beat:
        monkeypatch.setenv("KERNEL_DATABASE_URL", url)
        app = create_app("beat-test", **conf)
        # As `celery beat` does (celery.apps.beat.Beat): the class named by beat_scheduler.
        scheduler = Service(app, scheduler_cls=app.conf.beat_scheduler).get_scheduler()
        assert isinstance(scheduler, KernelScheduler)
        opened.append(scheduler)
        clock = ManualClock(Beat.minute(0.5))
        assert scheduler.kernel is not None
        scheduler.kernel.close()
        scheduler.kernel = Kernel.open(url, clock=clock)
        return Beat(scheduler, scheduler.kernel, clock, caplog)

    yield build
    for scheduler in opened:
        scheduler.close()


@pytest.fixture
def beat(open_beat: Callable[..., Beat], kernel_url: str) -> Beat:
    """A Beat on SQLite and, in a second run, on PostgreSQL."""
    return open_beat(kernel_url)


@pytest.fixture
def sqlite_beat(open_beat: Callable[..., Beat], tmp_path: Path) -> Beat:
    """A Beat on a SQLite file, for behaviour that does not depend on the back end."""
    return open_beat(f"sqlite:///{tmp_path / 'kernel.db'}")
