"""chords: a chord's members and body, and how many members have yet to succeed

A chord's body is made by the settle of its last member to succeed: each member's
success takes one from ``remaining`` in one guarded statement (the row held until that
settle commits), the one that reaches 0 makes the body. A member that fails for good
sets ``failed_at`` once: the body's errbacks are made, the body never.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-05 21:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "chords",
        sa.Column("id", sa.String(200), primary_key=True),
        sa.Column("members", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("remaining", sa.Integer(), nullable=False),
        sa.Column("failed_at", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("chords")
