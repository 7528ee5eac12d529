"""lean indexes: a claim or settle inserts into fewer of the occurrences' indexes

A claim or settle changes ``status``, so PostgreSQL writes a new entry into every index of
the row (no HOT update). Two indexes held entries no reader asks for: the pool index one
for every running occurrence outside a pool (readers ask for a named pool), the settled
index one for every unsettled occurrence (readers ask for settled before an instant).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 21:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_INDEXES = {
    # name: (column, predicate before, predicate after)
    "occurrences_pool": ("pool", "status = 'running'", "status = 'running' AND pool IS NOT NULL"),
    "occurrences_settled": ("settled_at", None, "settled_at IS NOT NULL"),
}


def _recreate(which: int) -> None:
    for name, (column, *predicates) in _INDEXES.items():
        predicate = predicates[which]
        where = None if predicate is None else sa.text(predicate)
        op.drop_index(name, table_name="occurrences")
        op.create_index(
            name, "occurrences", [column], unique=False, sqlite_where=where, postgresql_where=where
        )


def upgrade() -> None:
    _recreate(1)


def downgrade() -> None:
    _recreate(0)
