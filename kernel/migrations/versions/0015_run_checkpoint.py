"""run checkpoint: an occurrence keeps its newest checkpoint, stored with lease renewals

A running occurrence's progress (``ctx.checkpoint``) was kept only when a pause or a warm
shutdown handed it back, in its control row; a run killed mid-way started again from zero.
The occurrence's own ``checkpoint`` now holds the newest checkpoint of any kind; the
checkpoints controls already hold are copied into it.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05 18:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("occurrences", sa.Column("checkpoint", sa.Text(), nullable=True))
    op.execute(
        "UPDATE occurrences SET checkpoint = (SELECT controls.checkpoint FROM controls"
        " WHERE controls.occurrence_id = occurrences.id)"
        " WHERE EXISTS (SELECT 1 FROM controls WHERE controls.occurrence_id = occurrences.id)"
    )


def downgrade() -> None:
    with op.batch_alter_table("occurrences") as batch:
        batch.drop_column("checkpoint")
