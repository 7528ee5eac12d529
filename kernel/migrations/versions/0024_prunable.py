"""the oldest prunable rows of one status: a seek, not a sort of the status's whole history

Retention deletes, status by status, the oldest settled rows older than an age, a few at
a time. ``occurrences_settled_status (status, job_id, settled_at)`` could find a status's
rows but not in settle order, so each step read and sorted all of them while holding
SQLite's writer lock (7.6 ms for 50 rows of a 40k history, growing with it).
``occurrences_prunable`` hands them over oldest first. It replaces ``occurrences_settled
(settled_at)``, which only the prune read (and SQLite's planner passed over): still one
index entry per settle, and none for a dead letter.

Its key and predicate are on ``lower(status)`` (the status: statuses are lower case), an
expression only retention's query repeats. A plain ``(status, settled_at)`` index was taken
by PostgreSQL for a job's last success (kernel/jobs/health.py): a backward walk of the
status's whole history filtered by job, history-sized for a job with no recent success.
A query that does not state the expression can use this index neither to seek nor to scan.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-06 02:45:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

_SETTLED = "settled_at IS NOT NULL"
_PRUNABLE = "lower(status) IN ('succeeded', 'cancelled', 'skipped')"


def upgrade() -> None:
    op.create_index(
        "occurrences_prunable",
        "occurrences",
        [sa.text("lower(status)"), "settled_at"],
        sqlite_where=sa.text(_PRUNABLE),
        postgresql_where=sa.text(_PRUNABLE),
    )
    op.drop_index("occurrences_settled", table_name="occurrences")


def downgrade() -> None:
    op.create_index(
        "occurrences_settled",
        "occurrences",
        ["settled_at"],
        sqlite_where=sa.text(_SETTLED),
        postgresql_where=sa.text(_SETTLED),
    )
    op.drop_index("occurrences_prunable", table_name="occurrences")
