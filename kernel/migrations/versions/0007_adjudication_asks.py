"""adjudication_asks: a worker asking the adapter about an unknown outcome, fenced

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 17:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "adjudication_asks",
        sa.Column("occurrence_id", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("fence", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("token", sa.String(64), nullable=False),
        sa.Column("asker", sa.String(200), nullable=False),
        sa.Column("asks", sa.Integer(), nullable=False),
        sa.Column("asked_at", sa.BigInteger(), nullable=False),
        sa.Column("ask_deadline", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("state IN ('asking', 'cannot_tell')", name="ck_adjudication_asks_state"),
    )


def downgrade() -> None:
    op.drop_table("adjudication_asks")
