"""Revision 0016 upgrades a 0015 database with a job: the job holds no plan error, and
Beat's record of one lands on it; downgrading drops the column again."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from kernel.db.engine import create_kernel_engine
from kernel.store import Kernel
from kernel.testing import ManualClock


def _config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", "kernel:migrations")
    return cfg


def test_upgrade_from_0015_adds_an_empty_plan_error_and_downgrade_drops_it(
    kernel_url: str,
) -> None:
    cfg = _config()
    engine = create_kernel_engine(kernel_url)
    try:
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "0015")
            conn.execute(
                sa.text(
                    "INSERT INTO jobs (id, revision, digest, spec, enabled, planned,"
                    " defined_at, updated_at) VALUES ('j', 1, 'd', '{}', true, false, 1, 1)"
                )
            )
    finally:
        engine.dispose()
    kernel = Kernel.open(kernel_url, migrate_schema=True, clock=ManualClock())
    try:
        assert kernel.status()["unplannable"] == []
        assert kernel.record_unplannable("j", revision=1, error="E")
        assert kernel.status()["unplannable"] == [{"job_id": "j", "revision": 1, "error": "E"}]
    finally:
        kernel.close()
    engine = create_kernel_engine(kernel_url)
    try:
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "0015")
            columns = {c["name"] for c in sa.inspect(conn).get_columns("jobs")}
        assert "plan_error" not in columns and "schedule_spent" in columns
    finally:
        engine.dispose()
