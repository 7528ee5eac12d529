"""gates: the awaiting_approval status and its due time; budgets, their windows and reservations

Revision ID: 0005
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0003"
branch_labels = None
depends_on = None

_STATUS = "ck_occurrences_status"
_STATUSES = (
    "'queued', 'running', 'retry_wait', 'succeeded', 'dead_letter',"
    " 'needs_adjudication', 'cancelled', 'skipped'"
)
_AWAITING_INDEX = "occurrences_awaiting_approval"
_AWAITING_WHERE = "status = 'awaiting_approval'"


def upgrade() -> None:
    with op.batch_alter_table("occurrences") as batch:
        batch.add_column(sa.Column("approval_due_at", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("approval_auto", sa.String(length=8), nullable=True))
        batch.drop_constraint(_STATUS, type_="check")
        batch.create_check_constraint(
            _STATUS, sa.text(f"status IN ({_STATUSES}, 'awaiting_approval')")
        )
    op.create_index(
        _AWAITING_INDEX,
        "occurrences",
        ["approval_due_at"],
        sqlite_where=sa.text(_AWAITING_WHERE),
        postgresql_where=sa.text(_AWAITING_WHERE),
    )
    op.create_table(
        "budgets",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("window_s", sa.Float(), nullable=False),
        sa.Column("max_runs", sa.Integer(), nullable=True),
        sa.Column("max_units", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "budget_windows",
        sa.Column("budget", sa.String(length=140), nullable=False),
        sa.Column("window_start", sa.BigInteger(), nullable=False),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("units", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("runs >= 0 AND units >= 0", name="ck_budget_windows_counters"),
        sa.PrimaryKeyConstraint("budget", "window_start"),
    )
    op.create_table(
        "budget_reservations",
        sa.Column("occurrence_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("budget", sa.String(length=140), nullable=False),
        sa.Column("window_start", sa.BigInteger(), nullable=False),
        sa.Column("units", sa.BigInteger(), nullable=False),
        sa.Column("reserved_at", sa.BigInteger(), nullable=False),
        sa.Column("released_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("occurrence_id"),
    )


def downgrade() -> None:
    op.drop_table("budget_reservations")
    op.drop_table("budget_windows")
    op.drop_table("budgets")
    op.drop_index(_AWAITING_INDEX, table_name="occurrences")
    # Nothing may be left in the status the older schema does not know.
    op.execute(
        "UPDATE occurrences SET status = 'skipped', skip_reason = 'approval_downgrade',"
        " settled_at = updated_at WHERE status = 'awaiting_approval'"
    )
    with op.batch_alter_table("occurrences") as batch:
        batch.drop_constraint(_STATUS, type_="check")
        batch.create_check_constraint(_STATUS, sa.text(f"status IN ({_STATUSES})"))
        batch.drop_column("approval_auto")
        batch.drop_column("approval_due_at")
