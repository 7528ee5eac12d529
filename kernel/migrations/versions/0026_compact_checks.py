"""compact checks: PostgreSQL's CHECK constraints on occurrences in smaller parse trees

PostgreSQL parses and plans each stored CHECK of a table again in every statement that
writes one of its rows; on a batch's settle-and-claim the five checks of ``occurrences``
were ~13 % of its backend's CPU samples (bench/README.md, session 22). The same conditions are
stored here as text array literals and equalities of NULL tests, which decide every row
alike (``status`` and ``cancel_requested`` are NOT NULL): 10,240 characters of parse tree
become 5,426. SQLite compiles the checks into its prepared statements: unchanged.

Each is added NOT VALID and then validated (a scan of the table, in this migration's
transaction): the rows met the old checks, so they meet these.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-06 09:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

#: (name, compact condition, condition before); ck_occurrences_counters is left as it was.
_CHECKS = (
    (
        "ck_occurrences_status",
        "status::text = ANY ('{queued,running,retry_wait,succeeded,dead_letter,"
        "needs_adjudication,cancelled,skipped,awaiting_approval}'::text[])",
        "status IN ('queued', 'running', 'retry_wait', 'succeeded', 'dead_letter',"
        " 'needs_adjudication', 'cancelled', 'skipped', 'awaiting_approval')",
    ),
    (
        "ck_occurrences_lease_iff_running",
        "(lease_owner IS NULL) = (lease_expires_at IS NULL)"
        " AND (lease_owner IS NULL) = (status::text <> 'running')",
        "(status = 'running' AND lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL)"
        " OR (status <> 'running' AND lease_owner IS NULL AND lease_expires_at IS NULL)",
    ),
    (
        "ck_occurrences_no_waiting_cancel",
        "NOT (cancel_requested AND status::text = ANY ('{queued,retry_wait}'::text[]))",
        "NOT (cancel_requested AND status IN ('queued', 'retry_wait'))",
    ),
    (
        "ck_occurrences_settled_iff_final",
        "(settled_at IS NULL)"
        " <> (status::text = ANY ('{succeeded,dead_letter,cancelled,skipped}'::text[]))",
        "(status IN ('succeeded', 'dead_letter', 'cancelled', 'skipped')"
        " AND settled_at IS NOT NULL)"
        " OR (status NOT IN ('succeeded', 'dead_letter', 'cancelled', 'skipped')"
        " AND settled_at IS NULL)",
    ),
)


def _replace(conditions: list[tuple[str, str]]) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for name, condition in conditions:
        op.execute(
            f"ALTER TABLE occurrences DROP CONSTRAINT {name},"
            f" ADD CONSTRAINT {name} CHECK ({condition}) NOT VALID"
        )
        op.execute(f"ALTER TABLE occurrences VALIDATE CONSTRAINT {name}")


def upgrade() -> None:
    _replace([(name, compact) for name, compact, _ in _CHECKS])


def downgrade() -> None:
    _replace([(name, before) for name, _, before in _CHECKS])
