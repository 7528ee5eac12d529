"""occurrences_job also by settled_at: a job's last success or failure is one index seek

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03 17:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A superset of the old (job_id, status) index, which it replaces: every query that
    # used that one can use this, and a settle maintains one index, not two.
    op.drop_index("occurrences_job", table_name="occurrences")
    op.create_index("occurrences_job", "occurrences", ["job_id", "status", "settled_at"])


def downgrade() -> None:
    op.drop_index("occurrences_job", table_name="occurrences")
    op.create_index("occurrences_job", "occurrences", ["job_id", "status"])
