"""Revision 0006 upgrades a 0003 database with pooled runs: the counter starts exact
(an undefined pool gets its row at limit 1, a limit below 1 becomes 1), on both back ends."""

from __future__ import annotations

import sqlalchemy as sa

from kernel import Pool
from kernel.store import Kernel
from kernel.testing import ManualClock
from tests.kernel.migrating import A_JOB, revisions

_COLUMNS = (
    "id, job_id, job_revision, trigger_key, idempotency_key, scheduled_for, status, attempt,"
    " max_attempts, fence, lease_owner, lease_expires_at, available_at, queue, kind, delivery,"
    " exclusive, pool, definition, cancel_requested, chain_depth, created_at, updated_at"
)


def test_upgrade_from_0003_counts_the_running_occurrences_of_each_pool(kernel_url: str) -> None:
    with revisions(kernel_url) as db:
        db.upgrade("0003")
        db.conn.execute(A_JOB)
        db.conn.execute(sa.text("INSERT INTO pools (name, concurrency) VALUES ('db', 3)"))
        db.conn.execute(sa.text("INSERT INTO pools (name, concurrency) VALUES ('zero', 0)"))
        db.conn.execute(
            sa.text(
                f"INSERT INTO occurrences ({_COLUMNS}) VALUES (:id, 'j', 1, :key, :key, 1,"
                " :status, 1, 3, 1, :owner, :until, 1, 'default', 'callable',"
                " 'at-least-once', false, :pool, '{}', false, 0, 1, 1)"
            ),
            [
                {"id": n, "key": f"t{n}", "pool": pool, "status": status, **lease}
                for n, (pool, status) in enumerate(
                    [("db", "running"), ("db", "running"), ("db", "queued"), ("gpu", "running")]
                )
                for lease in [
                    {"owner": "w", "until": 10**13}
                    if status == "running"
                    else {"owner": None, "until": None}
                ]
            ],
        )
    kernel = Kernel.open(kernel_url, migrate_schema=True, clock=ManualClock())
    try:
        assert kernel.pools() == [
            Pool("db", 3, 2, 1),
            Pool("gpu", 1, 1, 0),
            Pool("zero", 1, 0, 0),
        ]
        kernel.succeed(3, owner="w", fence=1)
        assert kernel.pools()[1] == Pool("gpu", 1, 0, 0)
    finally:
        kernel.close()
