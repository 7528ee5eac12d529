"""notifications: a job's notify of one failed run, delivered at most once

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03 17:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "notifications",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("occurrence_id", sa.BigInteger(), nullable=False),
        sa.Column("fence", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(128), nullable=False),
        sa.Column("event", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("tries", sa.Integer(), nullable=False),
        sa.Column("next_at", sa.BigInteger(), nullable=False),
        sa.Column("token", sa.String(64)),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("last_error", sa.Text()),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.UniqueConstraint("occurrence_id", "fence", name="notifications_run"),
        sa.CheckConstraint(
            "state IN ('pending', 'delivering', 'delivered', 'failed')",
            name="ck_notifications_state",
        ),
    )
    op.create_index(
        "notifications_due",
        "notifications",
        ["next_at"],
        sqlite_where=sa.text("state = 'pending'"),
        postgresql_where=sa.text("state = 'pending'"),
    )


def downgrade() -> None:
    op.drop_index("notifications_due", table_name="notifications")
    op.drop_table("notifications")
