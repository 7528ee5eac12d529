"""chords with an empty header, found by age: ``chords_empty (closed_at) WHERE members = '[]'``

Retention deletes a done chord's row with the last of its members. A chord with an empty
header (Celery's replace by an empty group) has none: its body is made at once, and its
row was never deleted. Retention now deletes such rows by age (``succeeded``'s, as a
success closed then), reading them oldest first through this index: one seek per step,
never a scan of the chords that history still names.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-06 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

_EMPTY = "members = '[]'"


def upgrade() -> None:
    op.create_index(
        "chords_empty",
        "chords",
        ["closed_at"],
        sqlite_where=sa.text(_EMPTY),
        postgresql_where=sa.text(_EMPTY),
    )


def downgrade() -> None:
    op.drop_index("chords_empty", table_name="chords")
