"""notify events: a run notifies each event once, whoever made the change

A notification is written in the transaction of the change that causes it (a dead
letter, a failed run, a run left needing adjudication, a watchdog finding), so one run
may notify more than one event: a verdict that abandons a run notified as
``needs_adjudication`` is its ``dead_letter`` too. The unique key becomes
(``occurrence_id``, ``fence``, ``event``), and ``event`` widens to hold
``needs_adjudication``.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_PENDING = sa.text("state = 'pending'")


def _swap(old: str, new: str, columns: list[str], width: int) -> None:
    # SQLite recreates the table in batch mode: its partial index is dropped first and
    # made again after, as it was.
    op.drop_index("notifications_due", table_name="notifications")
    with op.batch_alter_table("notifications") as batch:
        batch.drop_constraint(old, type_="unique")
        batch.alter_column("event", type_=sa.String(width), existing_nullable=False)
        batch.create_unique_constraint(new, columns)
    op.create_index(
        "notifications_due",
        "notifications",
        ["next_at"],
        sqlite_where=_PENDING,
        postgresql_where=_PENDING,
    )


def upgrade() -> None:
    _swap("notifications_run", "notifications_run_event", ["occurrence_id", "fence", "event"], 32)


def downgrade() -> None:
    # Before 0019 a run notified once, of its failed settle only.
    op.execute("DELETE FROM notifications WHERE event NOT IN ('dead_letter', 'failed')")
    _swap("notifications_run_event", "notifications_run", ["occurrence_id", "fence"], 16)
