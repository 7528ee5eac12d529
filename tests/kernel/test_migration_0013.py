"""Revision 0013 upgrades a log written before it: the old events keep no writing
transaction (NULL), count as committed long ago, and a follower delivers each once beside
the new ones; the revision goes down and up again, on both back ends."""

from __future__ import annotations

import sqlalchemy as sa

from kernel import EventCursor
from kernel.store import Kernel
from kernel.testing import ManualClock
from tests.kernel.migrating import revisions


def _alembic(url: str, *steps: tuple[str, str], then: str | None = None) -> None:
    """Run ``(command, revision)`` steps, then ``then`` (SQL) in the same transaction."""
    with revisions(url) as db:
        for step, revision in steps:
            getattr(db, step)(revision)
        if then is not None:
            db.conn.execute(sa.text(then))


def test_old_events_are_followed_once_beside_new_ones(kernel_url: str) -> None:
    _alembic(
        kernel_url,
        ("upgrade", "0012"),
        then="INSERT INTO events (at, type, job_id, data) VALUES (1, 'job_defined', 'old', '{}')",
    )
    kernel = Kernel.open(kernel_url, migrate_schema=True, clock=ManualClock())
    try:
        now = kernel.event_cursor()
        kernel.enqueue(task="proj.new")
        with kernel.engine.connect() as conn:
            xacts = dict(conn.execute(sa.text("SELECT job_id, xact FROM events")).all())
        assert xacts["old"] is None
        assert (xacts["task:proj.new"] is not None) == kernel_url.startswith("postgresql")
        everything, _ = kernel.follow_events(EventCursor(), limit=1000)
        assert [e.job_id for e in everything][0] == "old" and len(everything) == 3
        new, _ = kernel.follow_events(now, limit=1000)
        assert new == everything[1:]
    finally:
        kernel.close()
    _alembic(kernel_url, ("downgrade", "0012"), ("upgrade", "head"))
