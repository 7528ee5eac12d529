"""plan error: a job Beat cannot plan says why on its row

``plan_error``: the error Beat met planning (or firing) the job's current revision, set
with event ``job_unplannable``; the revision's next fire, or a new revision, clears it.
``kernel status`` and ``kernel doctor`` list the enabled jobs that hold one.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-05 19:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("plan_error", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("plan_error")
