"""lost leases: a reclaim after an expired lease counts a lost lease, not an attempt

A worker killed mid-run (kill -9, a lost host) is not the task's failure: its run is
reclaimed without spending the retry budget. ``lost_leases`` counts those reclaims and
``max_lost_leases`` (the job's setting, default 3) bounds them, so a run that kills every
worker it lands on is dead-lettered (POISON_PILL) instead of reclaimed forever. Existing
rows start at 0 lost leases under the default bound.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05 18:45:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "occurrences",
        sa.Column("lost_leases", sa.Integer(), nullable=False, server_default="0"),
    )
    op.add_column(
        "occurrences",
        sa.Column("max_lost_leases", sa.Integer(), nullable=False, server_default="3"),
    )


def downgrade() -> None:
    with op.batch_alter_table("occurrences") as batch:
        batch.drop_column("max_lost_leases")
        batch.drop_column("lost_leases")
