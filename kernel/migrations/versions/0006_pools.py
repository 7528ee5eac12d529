"""pools: a limit and a running counter per pool, the data guard of a pool's limit

Revision ID: 0006
Revises: 0003
Create Date: 2026-12-01 14:00:00

``concurrency`` becomes ``limit``; ``running`` starts as the number of occurrences of
the pool running now, and a pool that running occurrences name without a row gets one
with the default limit 1, so the counter is exact from the first claim on.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

POOL_CHECKS = (("ck_pools_counters", 'running >= 0 AND "limit" >= 1'),)


def upgrade() -> None:
    with op.batch_alter_table("pools") as batch:
        batch.alter_column("concurrency", new_column_name="limit")
        batch.add_column(sa.Column("running", sa.Integer(), nullable=False, server_default="0"))
    op.execute(
        'INSERT INTO pools (name, "limit", running)'
        " SELECT DISTINCT pool, 1, 0 FROM occurrences"
        " WHERE pool IS NOT NULL AND status = 'running'"
        " AND pool NOT IN (SELECT name FROM pools)"
    )
    op.execute(
        "UPDATE pools SET running = (SELECT count(*) FROM occurrences"
        " WHERE occurrences.pool = pools.name AND occurrences.status = 'running')"
    )
    # A limit below 1 meant 1 to the claim ("or 1"); the counter check needs it said.
    op.execute('UPDATE pools SET "limit" = 1 WHERE "limit" < 1')
    with op.batch_alter_table("pools") as batch:
        for name, condition in POOL_CHECKS:
            batch.create_check_constraint(name, sa.text(condition))


def downgrade() -> None:
    with op.batch_alter_table("pools") as batch:
        for name, _ in POOL_CHECKS:
            batch.drop_constraint(name, type_="check")
        batch.drop_column("running")
        batch.alter_column("limit", new_column_name="concurrency")
