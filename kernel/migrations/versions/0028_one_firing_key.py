"""one unique key per firing: ``occurrences_idempotency_key`` dropped, (job_id, trigger_key) kept

A claim or a settle is no HOT update on PostgreSQL (status, lease and settle time are in
index keys and predicates), so it writes an entry into every full index of
``occurrences``; every insert does so on both dialects. The unique index on
``idempotency_key`` was one of them, and it refused nothing the unique
``occurrences_job_trigger (job_id, trigger_key)`` does not: the column stays (it is
public), its uniqueness follows from the other key, and every lookup by it now goes by
(job_id, trigger_key).

Why unique (job_id, trigger_key) implies unique ``idempotency_key``: every key the
kernel has written since revision 0001 is made of the row's own job id and trigger key,

* an enqueued run (kernel/spec/enqueue_request.py): ``<job id>|<trigger key>``, its
  trigger key ``key:...``, ``enqueue:...`` or ``replacing:...``;
* every other creation (Beat, run-now, chains, fan-ins, backfills;
  kernel/occurrences/firing.py ``idempotency_key``): ``<job id>|<trigger key>|r<revision>``,
  then ``|p<16 hex digits>`` when it has run parameters, its trigger key
  ``cron:``/``at:``/``every:``/``manual:``/``chain:``/``fan_in:...``, never one of the
  three above.

A job id never contains ``|`` (``[A-Za-z0-9][A-Za-z0-9._:-]*``, validated since before
revision 0001, task names included: ``task:<name>``), so a key's first ``|`` ends its
job id: two rows of different jobs have different keys. Of one job, an enqueued run's
rest starts with an enqueue-only kind and a firing's with a firing kind, so they differ;
two firings' rests end in ``|r<digits>`` or ``|p<hex>``, neither holding ``|``, so read
from the right, equal rests have equal revisions, equal digests and equal trigger keys.
Hence different (job, trigger key) give different keys; the rows already stored met
both indexes. Replacements and chord members are enqueued runs; a run-now with params and
a backfill are firings, their params' digest after the revision; a retry or a resume
reuses its row. Every insert says ``ON CONFLICT DO NOTHING`` without a target, so a
firing or key that exists is refused by the remaining unique index exactly as before, and
two transactions inserting one firing still wait for each other there.

What it saves: one index entry (and its WAL record) per claim, per settle and per
created run on PostgreSQL; one per created run on SQLite (whose updates write only the
indexes of changed columns). SQLite cannot drop a table's UNIQUE constraint: the table
is copied (alembic's batch mode), ``occurrences_prunable`` (an expression index batch
mode cannot reflect) dropped before and made again after.

Upgrade the database (``kernel migrate``) before the workers: a worker of the revision
before looks enqueued keys up by ``idempotency_key``, which no index serves any more.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-06 16:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

_NAME = "occurrences_idempotency_key"
_PRUNABLE = "lower(status) IN ('succeeded', 'cancelled', 'skipped')"


def _change_key(change: str) -> None:
    """``change`` (``drop`` or ``create``) the unique key: in place on PostgreSQL, by a
    copy of the table on SQLite."""
    if op.get_bind().dialect.name == "postgresql":
        if change == "drop":
            op.drop_constraint(_NAME, "occurrences", type_="unique")
        else:
            op.create_unique_constraint(_NAME, "occurrences", ["idempotency_key"])
        return
    op.drop_index("occurrences_prunable", table_name="occurrences")
    with op.batch_alter_table("occurrences", recreate="always") as batch:
        if change == "drop":
            batch.drop_constraint(_NAME, type_="unique")
        else:
            batch.create_unique_constraint(_NAME, ["idempotency_key"])
    op.create_index(
        "occurrences_prunable",
        "occurrences",
        [sa.text("lower(status)"), "settled_at"],
        sqlite_where=sa.text(_PRUNABLE),
    )


def upgrade() -> None:
    _change_key("drop")


def downgrade() -> None:
    _change_key("create")
