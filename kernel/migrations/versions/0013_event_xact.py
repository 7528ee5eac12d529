"""event writer's transaction: followers read the log by commit, not by id

Event ids come from a sequence, so on PostgreSQL a transaction can commit id 3 while
another still holds ids 1 and 2; a follower that keeps "the last id seen" skips them for
good. Each event now records the id of the transaction that wrote it (``xact``, PostgreSQL
only, set by the column's default), and a follower's cursor is a snapshot: what it has
delivered is what that snapshot sees (see ``kernel/follow.py``). SQLite serialises its
writers, so ids commit in order there and the column stays NULL. Rows written before this
revision keep NULL: their transactions committed long ago, and every snapshot sees them.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05 18:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_WRITTEN = sa.text("xact IS NOT NULL")


def upgrade() -> None:
    op.add_column("events", sa.Column("xact", sa.BigInteger))
    if op.get_bind().dialect.name == "postgresql":
        # Set apart from ADD COLUMN, which would evaluate a volatile default for every old
        # row (a rewrite of the log). xid8 as bigint: indexable, and 64 bits never wrap.
        op.alter_column(
            "events", "xact", server_default=sa.text("(pg_current_xact_id()::text::bigint)")
        )
    op.create_index(
        "events_xact", "events", ["xact"], sqlite_where=_WRITTEN, postgresql_where=_WRITTEN
    )


def downgrade() -> None:
    op.drop_index("events_xact", table_name="events")
    with op.batch_alter_table("events") as batch:
        batch.drop_column("xact")
