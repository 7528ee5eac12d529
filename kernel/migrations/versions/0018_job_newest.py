"""a job's newest occurrences: one seek, not a sort of the job's whole history

``occurrences_job_newest (job_id, id)`` serves a job's occurrence list newest first (its
console page, ``kernel occurrences list --job``) by walking the index backwards from the
job's newest id; ``occurrences_job (job_id, status, settled_at)`` can only find the job's
rows, which then had to be sorted all together. One more entry per occurrence made, none
per claim or settle (neither column changes).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05 20:40:00
"""

from __future__ import annotations

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("occurrences_job_newest", "occurrences", ["job_id", "id"])


def downgrade() -> None:
    op.drop_index("occurrences_job_newest", table_name="occurrences")
