"""start deadline: an occurrence may carry ``expires_at``, the instant after which it is
never started (Celery's ``expires``)

A claim or Beat's upkeep that meets a waiting occurrence at or after its deadline settles
it ``skipped`` (reason ``expired``) instead of running it late. Existing rows have no
deadline. The partial index keeps the upkeep's sweep a seek over waiting rows that carry
one.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-05 20:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

_WHERE = sa.text("status IN ('queued', 'retry_wait') AND expires_at IS NOT NULL")


def upgrade() -> None:
    op.add_column("occurrences", sa.Column("expires_at", sa.BigInteger(), nullable=True))
    op.create_index(
        "occurrences_expiring",
        "occurrences",
        ["expires_at"],
        unique=False,
        sqlite_where=_WHERE,
        postgresql_where=_WHERE,
    )


def downgrade() -> None:
    op.drop_index("occurrences_expiring", table_name="occurrences")
    with op.batch_alter_table("occurrences") as batch:
        batch.drop_column("expires_at")
