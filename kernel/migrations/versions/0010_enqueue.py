"""enqueue: an occurrence's claim priority, and room for an enqueue key in its trigger key

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03 17:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "occurrences",
        sa.Column("priority", sa.Integer(), nullable=False, server_default="0"),
    )
    if op.get_bind().dialect.name == "postgresql":
        # `key:` + a caller's key of up to 200 characters; SQLite does not enforce lengths.
        op.alter_column("occurrences", "trigger_key", type_=sa.String(210), existing_nullable=False)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.alter_column("occurrences", "trigger_key", type_=sa.String(200), existing_nullable=False)
    op.drop_column("occurrences", "priority")
