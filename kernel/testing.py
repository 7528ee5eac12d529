"""Test support: a manual clock and an in-memory kernel on real SQLite."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.pool import StaticPool

from kernel.db.engine import create_kernel_engine, migrate
from kernel.store import Kernel

__all__ = ["ManualClock", "memory_kernel"]


class ManualClock:
    """A clock that moves only when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        start = start or datetime(2026, 1, 1, tzinfo=UTC)
        self.ms = int(start.timestamp() * 1000)

    def now_ms(self, conn: sa.Connection) -> int:
        return self.ms

    @property
    def now(self) -> datetime:
        return datetime.fromtimestamp(self.ms / 1000, tz=UTC)

    def advance(self, seconds: float) -> None:
        self.ms += int(seconds * 1000)

    def set(self, when: datetime) -> None:
        self.ms = int(when.timestamp() * 1000)

    def __add__(self, delta: timedelta) -> datetime:
        return self.now + delta


def memory_kernel(clock: ManualClock | None = None) -> Kernel:
    """A migrated kernel in one shared in-memory SQLite connection (not for concurrency tests)."""
    engine = create_kernel_engine(
        "sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False}
    )
    migrate(engine)
    return Kernel(engine, clock=clock or ManualClock())
