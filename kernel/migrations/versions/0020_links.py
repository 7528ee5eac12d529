"""links: an enqueued occurrence's callbacks and errbacks (Celery's link, link_error, a
chain's rest), created by the transaction that settles it

``links`` is NULL for every occurrence without them, so a plain success (one statement)
checks one column instead of reading the run's definition. Existing rows have none.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05 20:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("occurrences", sa.Column("links", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("occurrences") as batch:
        batch.drop_column("links")
