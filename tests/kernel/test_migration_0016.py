"""Revision 0016 upgrades a 0015 database with a job: the job holds no plan error, and
Beat's record of one lands on it; downgrading drops the column again."""

from __future__ import annotations

import sqlalchemy as sa

from kernel.store import Kernel
from kernel.testing import ManualClock
from tests.kernel.migrating import A_JOB, revisions


def test_upgrade_from_0015_adds_an_empty_plan_error_and_downgrade_drops_it(
    kernel_url: str,
) -> None:
    with revisions(kernel_url) as db:
        db.upgrade("0015")
        db.conn.execute(A_JOB)
    kernel = Kernel.open(kernel_url, migrate_schema=True, clock=ManualClock())
    try:
        assert kernel.status()["unplannable"] == []
        assert kernel.record_unplannable("j", revision=1, error="E")
        assert kernel.status()["unplannable"] == [{"job_id": "j", "revision": 1, "error": "E"}]
    finally:
        kernel.close()
    with revisions(kernel_url) as db:
        db.downgrade("0015")
        columns = {c["name"] for c in sa.inspect(db.conn).get_columns("jobs")}
    assert "plan_error" not in columns and "schedule_spent" in columns
