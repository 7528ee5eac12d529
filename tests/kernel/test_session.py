"""A kernel write is one transaction whichever layer runs its statements.

On SQLite a write begins and commits on the driver (``kernel.db.engine.begin_write``);
a Core statement inside it makes SQLAlchemy begin a transaction that joins the driver's.
Either way everything the write did commits together, and a refusal undoes all of it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import sqlalchemy as sa

from kernel.db.process_id import current_pid
from kernel.db.schema import events
from kernel.errors import NotFound
from kernel.events import EventType
from kernel.store import Kernel
from kernel.transaction.session import Session
from kernel.transaction.tx import Tx


def _write(tx: Tx, *, core: bool, driver: bool, refuse: bool) -> None:
    if core:  # through SQLAlchemy's Connection.execute
        tx.conn.execute(
            sa.insert(events).values(at=tx.now, type=EventType.WATCHDOG_OVERDUE, data="{}")
        )
    if driver:  # through a DriverStatement, on the driver's cursor
        tx.emit(EventType.WATCHDOG_OVERDUE)
    if refuse:
        raise NotFound("refused after writing")


@pytest.mark.parametrize("core", [False, True], ids=["driver-only", "core-and-driver"])
def test_a_write_commits_or_refuses_as_one_transaction(kernel_url: str, core: bool) -> None:
    kernel = Kernel.open(kernel_url, migrate_schema=True)
    session = Session(kernel.engine, kernel.clock)

    def count() -> int:
        with kernel.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(events)).scalar_one())

    before = count()
    with pytest.raises(NotFound):
        session.run(_write, core=core, driver=True, refuse=True)
    assert count() == before  # nothing of the refused write stayed
    session.run(_write, core=core, driver=True, refuse=False)
    assert count() == before + (2 if core else 1)
    # The held connection is clean for the next write, in either order of layers.
    session.run(_write, core=True, driver=False, refuse=False)
    session.run(_write, core=False, driver=True, refuse=False)
    assert count() == before + (4 if core else 3)
    session.close()
    kernel.close()


def test_a_forked_child_writes_on_a_connection_of_its_own(tmp_path: Path) -> None:
    """A prefork child inherits its parent's kernel: it must open its own connection (the
    process id the session compares is the child's, kept without a system call per write),
    and the parent's held connection goes on working."""
    kernel = Kernel.open(f"sqlite:///{tmp_path / 'kernel.db'}", migrate_schema=True)
    try:
        kernel._session.run(_write, core=False, driver=True, refuse=False)
        parent_conn = kernel._session._held.conn
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report, never return into pytest
            status = 1
            try:
                kernel._session.run(_write, core=False, driver=True, refuse=False)
                held = kernel._session._held
                fresh = held.conn is not None and held.conn is not parent_conn
                status = 0 if fresh and held.pid == current_pid() == os.getpid() else 2
            finally:
                os.write(write, bytes([status]))
                os._exit(0)
        os.close(write)
        os.waitpid(pid, 0)
        assert os.read(read, 1) == bytes([0])
        kernel._session.run(_write, core=False, driver=True, refuse=False)
        assert kernel._session._held.conn is parent_conn
        with kernel.engine.connect() as conn:
            written = conn.execute(sa.select(sa.func.count()).select_from(events)).scalar_one()
        assert written == 3
    finally:
        kernel.close()
