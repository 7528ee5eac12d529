"""rate limits: a task's rate_limit kept across all workers and hosts

A claim of an occurrence whose snapshot has a ``rate_limit`` takes the token of its
limit (``occurrences.rate_limit``: ``task:<task>`` or the job's id) in the table
``rate_limits``: only at or after ``next_free_at``, which it moves to now plus the run's
interval. Existing rows have no rate limit.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-05 20:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("occurrences", sa.Column("rate_limit", sa.String(200), nullable=True))
    op.create_table(
        "rate_limits",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("next_free_at", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("rate_limits")
    with op.batch_alter_table("occurrences") as batch:
        batch.drop_column("rate_limit")
