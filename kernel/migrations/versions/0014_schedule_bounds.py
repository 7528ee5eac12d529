"""schedule bounds: a job counts the runs its schedule made, and knows it ran out

``scheduled_runs``: the firings the job's schedule made that were not skipped, counted as
Beat makes them (``max_runs`` is a bound on them; counting the rows kept undercounted once
history went). ``schedule_spent``: the job was disabled by its own schedule running out
(``end``, ``max_runs``, a one-shot fired), so the firings it made before still run.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05 18:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "jobs", sa.Column("scheduled_runs", sa.Integer(), nullable=False, server_default="0")
    )
    op.add_column(
        "jobs",
        sa.Column("schedule_spent", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    # What is still kept is the best count there is for runs made before this revision.
    op.execute(
        "UPDATE jobs SET scheduled_runs = (SELECT count(*) FROM occurrences o"
        " WHERE o.job_id = jobs.id AND o.status <> 'skipped'"
        " AND (o.trigger_key LIKE 'cron:%' OR o.trigger_key LIKE 'every:%'))"
    )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("schedule_spent")
        batch.drop_column("scheduled_runs")
