"""one index of settled rows by status: ``occurrences_settled_by_status`` replaces
``occurrences_prunable`` and ``occurrences_settled_status``

A settle is no HOT update on PostgreSQL, so it writes an entry into every index whose key
or predicate its new row meets; on SQLite a settle writes each index whose columns it sets.
A success met both ``occurrences_prunable (lower(status), settled_at)``, partial on the
retention states, and ``occurrences_settled_status (status, job_id, settled_at)``, partial
on ``settled_at IS NOT NULL``. ``occurrences_settled_by_status (lower(status),
settled_at)``, partial on every settled state, serves what both did: one entry per settle,
where a success, a cancel and a skip wrote two.

What each dropped index served, and what serves it now (tests/kernel/test_history_plans.py
and test_contract_job_health.py check each plan on both dialects):

* ``occurrences_prunable``: retention's oldest rows of one status
  (kernel/statements/history.py ``OLDEST_PRUNABLE``), a seek on ``lower(status) =
  :status`` in settle order. The new index has the same key; its predicate holds the
  prunable states and the dead letters besides, which retention never asks for (its
  statement keeps refusing them by its own condition, as before by the predicate).
* ``occurrences_settled_status``: (a) the capped count of each final state
  (kernel/reads.py), now a seek on ``lower(status) = '<state>'`` here, the dead letters
  included; (b) a job's failures since its last success (kernel/jobs/health.py), a seek
  on ``occurrences_job (job_id, status, settled_at)`` with the same three columns, which
  already served its last success and last failure. The new index leads with
  ``lower(status)``, an expression only those two readers state, so a job's figures can
  never be served by walking a status's whole history (revision 0024).

Neither index was unique: no row is refused or let in differently. A worker of the revision
before stays correct but its counts (and on SQLite its retention) no longer seek: upgrade
the database (``kernel migrate``) before the workers. PostgreSQL builds
the new index in the migration's transaction (a read of the table's settled rows).

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-06 19:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

_LOWER = sa.text("lower(status)")
_SETTLED = "lower(status) IN ('succeeded', 'dead_letter', 'cancelled', 'skipped')"
_PRUNABLE = "lower(status) IN ('succeeded', 'cancelled', 'skipped')"
_WITH_SETTLE_TIME = "settled_at IS NOT NULL"


def _create(name: str, columns: list[sa.TextClause | str], predicate: str) -> None:
    where = sa.text(predicate)
    op.create_index(name, "occurrences", columns, sqlite_where=where, postgresql_where=where)


def upgrade() -> None:
    _create("occurrences_settled_by_status", [_LOWER, "settled_at"], _SETTLED)
    op.drop_index("occurrences_prunable", table_name="occurrences")
    op.drop_index("occurrences_settled_status", table_name="occurrences")


def downgrade() -> None:
    _create("occurrences_settled_status", ["status", "job_id", "settled_at"], _WITH_SETTLE_TIME)
    _create("occurrences_prunable", [_LOWER, "settled_at"], _PRUNABLE)
    op.drop_index("occurrences_settled_by_status", table_name="occurrences")
