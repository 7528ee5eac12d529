"""Revision 0015 upgrades a 0014 database with a paused occurrence: the checkpoint its
control holds becomes the occurrence's own, so its resume still starts from it."""

from __future__ import annotations

import sqlalchemy as sa

from kernel.store import Kernel
from kernel.testing import ManualClock
from tests.kernel.migrating import A_JOB, revisions

_COLUMNS = (
    "id, job_id, job_revision, trigger_key, idempotency_key, scheduled_for, status, attempt,"
    " max_attempts, fence, available_at, queue, kind, delivery, exclusive, definition,"
    " cancel_requested, chain_depth, created_at, updated_at"
)
_ENVELOPE = '{"data":{"done":7},"safe_point":"adapter_checkpoint","schema_version":1}'


def test_upgrade_from_0014_keeps_a_paused_checkpoint(kernel_url: str) -> None:
    with revisions(kernel_url) as db:
        db.upgrade("0014")
        db.conn.execute(A_JOB)
        db.conn.execute(
            sa.text(
                f"INSERT INTO occurrences ({_COLUMNS}) VALUES (:id, 'j', 1, :key, :key, 1,"
                " 'retry_wait', 1, 3, 1, 1, 'default', 'callable', 'at-least-once', false,"
                " '{\"lease\": 30}', false, 0, 1, 1)"
            ),
            [{"id": 1, "key": "paused"}, {"id": 2, "key": "plain"}],
        )
        db.conn.execute(
            sa.text(
                "INSERT INTO controls (occurrence_id, state, revision, expected_fence,"
                " safe_points, checkpoint, updated_at)"
                " VALUES (1, 'resumed', 3, 1, '[\"adapter_checkpoint\"]', :c, 1)"
            ),
            {"c": _ENVELOPE},
        )
    kernel = Kernel.open(kernel_url, migrate_schema=True, clock=ManualClock())
    try:
        assert kernel.get_occurrence(2).checkpoint is None
        assert kernel.get_occurrence(1).checkpoint == {"done": 7}
        claim = kernel.claim(1, owner="w", lease=30)
        assert claim is not None and claim.resumed and claim.checkpoint == {"done": 7}
    finally:
        kernel.close()
