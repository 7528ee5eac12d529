"""The Kernel facade: one method per operation, each one transaction with its events.

``Kernel`` is composed of the parts in :mod:`kernel.facade`, one a noun (jobs, Beat,
workers, operators, gates, reads, upkeep, adapter verdicts); this module opens and closes it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from kernel.db.clock import Clock, default_clock
from kernel.db.driver import render_all
from kernel.db.engine import check_schema, create_kernel_engine, migrate
from kernel.db.translate import guard
from kernel.facade import (
    BeatFacade,
    EnqueueFacade,
    GateFacade,
    HealthFacade,
    JobFacade,
    ObserveFacade,
    OperatorFacade,
    ScheduleFacade,
    UpkeepFacade,
    VerdictFacade,
    WorkerFacade,
)
from kernel.jobs import definitions as job_ops
from kernel.records import to_dt
from kernel.transaction.session import Session
from kernel.types import DispatchHint

__all__ = ["Kernel", "FireReport"]

FireReport = job_ops.FireReport


class Kernel(
    JobFacade,
    ScheduleFacade,
    BeatFacade,
    WorkerFacade,
    OperatorFacade,
    GateFacade,
    ObserveFacade,
    UpkeepFacade,
    VerdictFacade,
    HealthFacade,
    EnqueueFacade,
):
    """The durable authority for occurrences, fences, leases, controls and retries.

    Args:
        engine: from :func:`kernel.db.engine.create_kernel_engine`.
        clock: where "now" comes from; default: the database server's clock on
            PostgreSQL, this host's on SQLite.
        check: refuse a database whose schema this code does not know.
        on_runs_made: called once a write commits with the runs it made that may run
            now (a settle's chain step, chord body, errback), marked hinted: a process
            that publishes them spares them the wait for Beat's pump.
    """

    def __init__(
        self,
        engine: sa.Engine,
        *,
        clock: Clock | None = None,
        check: bool = True,
        on_runs_made: Callable[[list[DispatchHint]], None] | None = None,
    ) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self.clock = clock or default_clock(self.dialect)
        self.on_runs_made = on_runs_made
        self._session = Session(engine, self.clock)
        if check:
            guard(check_schema, engine)

    @classmethod
    def open(
        cls,
        url: str,
        *,
        migrate_schema: bool = False,
        check_schema: bool = True,
        clock: Clock | None = None,
        on_runs_made: Callable[[list[DispatchHint]], None] | None = None,
        **engine_kwargs: Any,
    ) -> Kernel:
        """Open the kernel at ``url``; ``migrate_schema`` upgrades the schema first.
        ``check_schema=False`` skips the schema check, for a process that knows the
        database was checked already."""
        engine = create_kernel_engine(url, **engine_kwargs)
        try:
            if migrate_schema:
                guard(migrate, engine)
            return cls(engine, clock=clock, check=check_schema, on_runs_made=on_runs_made)
        except BaseException:
            engine.dispose()  # nobody else can: the caller never gets the kernel
            raise

    def migrate(self) -> tuple[str | None, str]:
        return guard(migrate, self.engine)

    def close(self) -> None:
        self._session.close()
        self.engine.dispose()

    def prepare_fork(self) -> None:
        """Ready this kernel for processes forked from this one that go on using it (a
        prefork worker's pool): its statements are rendered for this database now, once,
        and shared by every child instead of each rendering (and copying) its own; its
        connections are closed, as a child must not use its parent's. A child that
        inherits it calls ``engine.dispose(close=False)`` before its first use, in case
        this process opened connections since (SQLAlchemy's advice for ``fork``).
        """
        render_all(self.engine.dialect)
        self._session.close()
        self.engine.dispose()

    def now(self) -> datetime:
        """The kernel's current time (the database clock on PostgreSQL)."""
        return to_dt(self._session.now_ms())  # type: ignore[return-value]
