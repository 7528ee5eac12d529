"""Alembic's revisions run by hand, as a migration test walks them: up to the revision a
test's old rows belong to, rows written in that shape, then up (or down) again.

:func:`revisions` opens one transaction on the kernel's database and hands out a
:class:`Revisions` on it: its ``conn`` for the test's SQL, ``upgrade``/``downgrade`` to
move the schema in that same transaction.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from kernel.db.engine import create_kernel_engine

__all__ = [
    "AN_OCCURRENCE",
    "A_JOB",
    "Revisions",
    "insert_occurrences",
    "occurrence_indexes",
    "revisions",
]

#: A job row as every revision since 0001 can hold it: ``j``, revision 1.
A_JOB = sa.text(
    "INSERT INTO jobs (id, revision, digest, spec, enabled, planned,"
    " defined_at, updated_at) VALUES ('j', 1, 'd', '{}', true, false, 1, 1)"
)
#: An occurrence of ``j`` as every revision since 0001 can hold it, its lease and state
#: given: ``id``, ``key``, ``status``, ``owner``, ``until``, ``cancel``, ``settled``.
AN_OCCURRENCE = sa.text(
    "INSERT INTO occurrences (id, job_id, job_revision, trigger_key, idempotency_key,"
    " scheduled_for, status, attempt, max_attempts, fence, lease_owner, lease_expires_at,"
    " available_at, queue, kind, delivery, exclusive, definition, cancel_requested,"
    " chain_depth, created_at, updated_at, settled_at) VALUES (:id, 'j', 1, :key, :key, 1,"
    " :status, 1, 3, 1, :owner, :until, 1, 'default', 'callable', 'at-least-once', false,"
    " '{}', :cancel, 0, 1, 5, :settled)"
)


def insert_occurrences(conn: sa.Connection, rows: list[tuple[Any, ...]]) -> None:
    """Job ``j`` and one occurrence per ``(status, owner, until, settled)`` row, ids and
    trigger keys ``t<id>`` from 1 in order, none cancelled."""
    conn.execute(A_JOB)
    conn.execute(
        AN_OCCURRENCE,
        [
            {
                **dict(zip(("status", "owner", "until", "settled"), row, strict=True)),
                "id": i,
                "key": f"t{i}",
                "cancel": False,
            }
            for i, row in enumerate(rows, start=1)
        ],
    )


def occurrence_indexes(conn: sa.Connection) -> set[str]:
    """The named indexes of ``occurrences`` (SQLAlchemy cannot reflect an expression's)."""
    query = (
        "SELECT indexname FROM pg_indexes WHERE tablename = 'occurrences'"
        if conn.dialect.name == "postgresql"
        else "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'occurrences'"
        " AND sql IS NOT NULL"
    )
    return set(conn.execute(sa.text(query)).scalars())


@dataclass(frozen=True)
class Revisions:
    """One open transaction and alembic's commands bound to it."""

    conn: sa.Connection
    config: Config

    def upgrade(self, revision: str) -> None:
        command.upgrade(self.config, revision)

    def downgrade(self, revision: str) -> None:
        command.downgrade(self.config, revision)


@contextmanager
def revisions(url: str) -> Iterator[Revisions]:
    """A transaction on ``url``'s database (committed at the end) with alembic on it."""
    config = Config()
    config.set_main_option("script_location", "kernel:migrations")
    engine = create_kernel_engine(url)
    try:
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            yield Revisions(conn, config)
    finally:
        engine.dispose()
