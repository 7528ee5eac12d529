"""invariants: CHECK constraints for impossible states, one running exclusive occurrence per job

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 11:15:00

Before adding the constraints, rows that 0001's read-decide-write transitions could
leave behind on PostgreSQL are repaired: a waiting occurrence with a cancel request
(no claim takes it; the accepted cancel wins, as the kernel now decides) is cancelled.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

#: (name, condition) for occurrences; names are what kernel/translate.py reports.
OCCURRENCE_CHECKS = (
    (
        "ck_occurrences_status",
        "status IN ('queued', 'running', 'retry_wait', 'succeeded', 'dead_letter',"
        " 'needs_adjudication', 'cancelled', 'skipped')",
    ),
    # A running occurrence has a holder and a lease; nothing else has either.
    (
        "ck_occurrences_lease_iff_running",
        "(status = 'running' AND lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL)"
        " OR (status <> 'running' AND lease_owner IS NULL AND lease_expires_at IS NULL)",
    ),
    # A waiting occurrence with a pending cancel would never be claimed again.
    (
        "ck_occurrences_no_waiting_cancel",
        "NOT (cancel_requested AND status IN ('queued', 'retry_wait'))",
    ),
    # Settled exactly when in a final state.
    (
        "ck_occurrences_settled_iff_final",
        "(status IN ('succeeded', 'dead_letter', 'cancelled', 'skipped')"
        " AND settled_at IS NOT NULL)"
        " OR (status NOT IN ('succeeded', 'dead_letter', 'cancelled', 'skipped')"
        " AND settled_at IS NULL)",
    ),
    ("ck_occurrences_counters", "fence >= 0 AND attempt >= 0 AND max_attempts >= 1"),
)
CONTROL_CHECKS = (
    (
        "ck_controls_state",
        "state IN ('pause_requested', 'paused', 'resumed', 'terminal')",
    ),
)
EXCLUSIVE_INDEX = "occurrences_one_running_exclusive"
_EXCLUSIVE_WHERE = "status = 'running' AND exclusive"


def upgrade() -> None:
    op.execute(
        "UPDATE occurrences SET status = 'cancelled', settled_at = updated_at"
        " WHERE cancel_requested AND status IN ('queued', 'retry_wait')"
    )
    op.execute(
        "UPDATE occurrences SET settled_at = updated_at"
        " WHERE status IN ('succeeded', 'dead_letter', 'cancelled', 'skipped')"
        " AND settled_at IS NULL"
    )
    op.execute(
        "UPDATE occurrences SET settled_at = NULL"
        " WHERE status NOT IN ('succeeded', 'dead_letter', 'cancelled', 'skipped')"
        " AND settled_at IS NOT NULL"
    )
    op.execute(
        "UPDATE occurrences SET lease_owner = NULL, lease_expires_at = NULL"
        " WHERE status <> 'running'"
    )
    with op.batch_alter_table("occurrences") as batch:
        for name, condition in OCCURRENCE_CHECKS:
            batch.create_check_constraint(name, sa.text(condition))
    with op.batch_alter_table("controls") as batch:
        for name, condition in CONTROL_CHECKS:
            batch.create_check_constraint(name, sa.text(condition))
    op.create_index(
        EXCLUSIVE_INDEX,
        "occurrences",
        ["job_id"],
        unique=True,
        sqlite_where=sa.text(_EXCLUSIVE_WHERE),
        postgresql_where=sa.text(_EXCLUSIVE_WHERE),
    )


def downgrade() -> None:
    op.drop_index(EXCLUSIVE_INDEX, table_name="occurrences")
    with op.batch_alter_table("controls") as batch:
        for name, _ in CONTROL_CHECKS:
            batch.drop_constraint(name, type_="check")
    with op.batch_alter_table("occurrences") as batch:
        for name, _ in OCCURRENCE_CHECKS:
            batch.drop_constraint(name, type_="check")
