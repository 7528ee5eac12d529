"""open chords: a chord whose members are still being made (``closed_at`` NULL)

A chord whose header is a generator is made before its members, each member counted in
as it is made, and closed with its size: its body is made by whichever transaction sees
it closed with every member settled (the close or the last member's settle). The chords
made before this revision had all their members when made: closed then.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-06 02:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("chords") as batch:
        batch.add_column(sa.Column("closed_at", sa.BigInteger(), nullable=True))
    op.execute("UPDATE chords SET closed_at = created_at")


def downgrade() -> None:
    with op.batch_alter_table("chords") as batch:
        batch.drop_column("closed_at")
