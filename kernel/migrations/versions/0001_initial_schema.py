"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-29 13:32:10.377288
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "beats",
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("host", sa.String(length=200), nullable=False),
        sa.Column("interval_s", sa.Float(), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("last_tick_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "controls",
        sa.Column("occurrence_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("state", sa.String(length=24), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("expected_fence", sa.Integer(), nullable=False),
        sa.Column("pause_request_id", sa.String(length=128), nullable=True),
        sa.Column("resume_request_id", sa.String(length=128), nullable=True),
        sa.Column("safe_points", sa.Text(), nullable=False),
        sa.Column("checkpoint", sa.Text(), nullable=True),
        sa.Column("requested_at", sa.BigInteger(), nullable=True),
        sa.Column("paused_at", sa.BigInteger(), nullable=True),
        sa.Column("resumed_at", sa.BigInteger(), nullable=True),
        sa.Column("terminal_at", sa.BigInteger(), nullable=True),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("occurrence_id"),
    )
    with op.batch_alter_table("controls", schema=None) as batch_op:
        batch_op.create_index("controls_state", ["state"], unique=False)

    op.create_table(
        "events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("at", sa.BigInteger(), nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("job_id", sa.String(length=128), nullable=True),
        sa.Column("occurrence_id", sa.BigInteger(), nullable=True),
        sa.Column("fence", sa.Integer(), nullable=True),
        sa.Column("data", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.create_index("events_job", ["job_id", "id"], unique=False)
        batch_op.create_index("events_occurrence", ["occurrence_id", "id"], unique=False)

    op.create_table(
        "jobs",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("spec", sa.Text(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("planned", sa.Boolean(), nullable=False),
        sa.Column("next_fire_at", sa.BigInteger(), nullable=True),
        sa.Column("next_trigger_key", sa.String(length=200), nullable=True),
        sa.Column("after_job", sa.String(length=128), nullable=True),
        sa.Column("defined_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index("jobs_after", ["after_job"], unique=False)
        batch_op.create_index(
            "jobs_due",
            ["next_fire_at"],
            unique=False,
            sqlite_where=sa.text("enabled AND planned"),
            postgresql_where=sa.text("enabled AND planned"),
        )
        batch_op.create_index(
            "jobs_unplanned",
            ["id"],
            unique=False,
            sqlite_where=sa.text("enabled AND NOT planned"),
            postgresql_where=sa.text("enabled AND NOT planned"),
        )

    op.create_table(
        "occurrences",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("job_revision", sa.Integer(), nullable=False),
        sa.Column("trigger_key", sa.String(length=200), nullable=False),
        sa.Column("idempotency_key", sa.String(length=400), nullable=False),
        sa.Column("scheduled_for", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(length=24), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("fence", sa.Integer(), nullable=False),
        sa.Column("lease_owner", sa.String(length=200), nullable=True),
        sa.Column("lease_expires_at", sa.BigInteger(), nullable=True),
        sa.Column("available_at", sa.BigInteger(), nullable=False),
        sa.Column("dispatched_at", sa.BigInteger(), nullable=True),
        sa.Column("queue", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("delivery", sa.String(length=16), nullable=False),
        sa.Column("exclusive", sa.Boolean(), nullable=False),
        sa.Column("pool", sa.String(length=128), nullable=True),
        sa.Column("definition", sa.Text(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("skip_reason", sa.String(length=64), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("parent_id", sa.BigInteger(), nullable=True),
        sa.Column("chain_depth", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.Column("settled_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("idempotency_key", name="occurrences_idempotency_key"),
        sa.UniqueConstraint("job_id", "trigger_key", name="occurrences_job_trigger"),
    )
    with op.batch_alter_table("occurrences", schema=None) as batch_op:
        batch_op.create_index(
            "occurrences_claimable",
            ["available_at"],
            unique=False,
            sqlite_where=sa.text("status IN ('queued', 'retry_wait')"),
            postgresql_where=sa.text("status IN ('queued', 'retry_wait')"),
        )
        batch_op.create_index("occurrences_job", ["job_id", "status"], unique=False)
        batch_op.create_index(
            "occurrences_pool",
            ["pool"],
            unique=False,
            sqlite_where=sa.text("status = 'running'"),
            postgresql_where=sa.text("status = 'running'"),
        )
        batch_op.create_index(
            "occurrences_running",
            ["lease_expires_at"],
            unique=False,
            sqlite_where=sa.text("status = 'running'"),
            postgresql_where=sa.text("status = 'running'"),
        )
        batch_op.create_index("occurrences_settled", ["settled_at"], unique=False)

    op.create_table(
        "operator_requests",
        sa.Column("request_id", sa.String(length=128), nullable=False),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("target", sa.String(length=200), nullable=False),
        sa.Column("evidence", sa.Text(), nullable=False),
        sa.Column("operator", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("request_id"),
    )
    op.create_table(
        "pools",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "requeue_grants",
        sa.Column("request_id", sa.String(length=128), nullable=False),
        sa.Column("occurrence_id", sa.BigInteger(), nullable=False),
        sa.Column("expected_fence", sa.Integer(), nullable=False),
        sa.Column("expected_error_code", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("claimed_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("request_id"),
    )
    with op.batch_alter_table("requeue_grants", schema=None) as batch_op:
        batch_op.create_index("requeue_grants_occurrence", ["occurrence_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("requeue_grants", schema=None) as batch_op:
        batch_op.drop_index("requeue_grants_occurrence")

    op.drop_table("requeue_grants")
    op.drop_table("pools")
    op.drop_table("operator_requests")
    with op.batch_alter_table("occurrences", schema=None) as batch_op:
        batch_op.drop_index("occurrences_settled")
        batch_op.drop_index(
            "occurrences_running",
            sqlite_where=sa.text("status = 'running'"),
            postgresql_where=sa.text("status = 'running'"),
        )
        batch_op.drop_index(
            "occurrences_pool",
            sqlite_where=sa.text("status = 'running'"),
            postgresql_where=sa.text("status = 'running'"),
        )
        batch_op.drop_index("occurrences_job")
        batch_op.drop_index(
            "occurrences_claimable",
            sqlite_where=sa.text("status IN ('queued', 'retry_wait')"),
            postgresql_where=sa.text("status IN ('queued', 'retry_wait')"),
        )

    op.drop_table("occurrences")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index(
            "jobs_unplanned",
            sqlite_where=sa.text("enabled AND NOT planned"),
            postgresql_where=sa.text("enabled AND NOT planned"),
        )
        batch_op.drop_index(
            "jobs_due",
            sqlite_where=sa.text("enabled AND planned"),
            postgresql_where=sa.text("enabled AND planned"),
        )
        batch_op.drop_index("jobs_after")

    op.drop_table("jobs")
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.drop_index("events_occurrence")
        batch_op.drop_index("events_job")

    op.drop_table("events")
    with op.batch_alter_table("controls", schema=None) as batch_op:
        batch_op.drop_index("controls_state")

    op.drop_table("controls")
    op.drop_table("beats")
