"""Revision 0014 upgrades a 0013 database: each job's count of the runs its schedule made
starts from the runs still kept (skipped firings and run-now's not counted), and no job
is marked as retired by its schedule, on both back ends."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from kernel.store import Kernel
from kernel.testing import ManualClock
from tests.kernel.migrating import revisions


def _cron_key(at: object) -> str:
    return "cron:" + str(at).replace(" ", "T").replace("+00:00", "Z")


def test_upgrade_from_0013_counts_the_runs_each_schedule_made(kernel_url: str) -> None:
    clock = ManualClock()
    kernel = Kernel.open(kernel_url, migrate_schema=True, clock=clock)
    try:
        kernel.define_job(
            {
                "id": "j",
                "kind": "callable",
                "payload": {"callable": "jobs.sample:run"},
                "overlap": "skip",  # the second firing is skipped: not a run
                "schedule": {"cron": "* * * * *", "max_runs": 5},
            }
        )
        at = [clock.now + timedelta(minutes=n) for n in range(3)]
        kernel.fire(
            "j",
            expected_revision=1,
            expected_cursor=None,
            firings=[(_cron_key(t), t) for t in at[:2]],
            next_cursor=(_cron_key(at[2]), at[2]),
        )
        kernel.run_now("j", request_id="by-hand", operator="ops", force=True)
    finally:
        kernel.close()
    with revisions(kernel_url) as db:
        db.downgrade("0013")
        db.upgrade("0014")
        row = db.conn.execute(sa.text("SELECT scheduled_runs, schedule_spent FROM jobs")).one()
    assert (row.scheduled_runs, bool(row.schedule_spent)) == (1, False)
