"""history indexes: what status, the watchdog and a job's page ask stays flat as history grows

``occurrences_settled_status`` lets status count each final state up to a bound by a seek
(one more entry per settle: measured in bench/README.md, "Flat with history");
``occurrences_adjudication`` holds only occurrences awaiting adjudication (never written on
the claim or settle of a run that ended); ``events_job_definitions`` holds only a job's
definition events, so its revisions are found without walking its whole event log.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05 18:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_INDEXES = (
    # name, table, columns, predicate
    (
        "occurrences_settled_status",
        "occurrences",
        ["status", "job_id", "settled_at"],
        "settled_at IS NOT NULL",
    ),
    ("occurrences_adjudication", "occurrences", ["updated_at"], "status = 'needs_adjudication'"),
    (
        "events_job_definitions",
        "events",
        ["job_id", "id"],
        "type IN ('job_defined', 'job_revised')",
    ),
)


def upgrade() -> None:
    for name, table, columns, predicate in _INDEXES:
        where = sa.text(predicate)
        op.create_index(name, table, columns, sqlite_where=where, postgresql_where=where)


def downgrade() -> None:
    for name, table, _, _ in reversed(_INDEXES):
        op.drop_index(name, table_name=table)
