"""Revision 0028 upgrades a 0027 database holding occurrences: the unique index on
``idempotency_key`` is gone (its rows, their ids and the other indexes kept; SQLite's table
copied), the unique (job_id, trigger_key) still refuses a second row of one firing, and a
downgrade makes ``idempotency_key`` unique again."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from kernel.db.engine import HEAD_REVISION
from kernel.db.schema_shape import expected_shape, live_shape
from tests.kernel.migrating import insert_occurrences, occurrence_indexes, revisions

_ROWS = [
    ("queued", None, None, None),
    ("running", "w", 10**13, None),
    ("succeeded", None, None, 5),
    ("cancelled", None, None, 5),
]
#: One firing's second row under another idempotency key; one key under another firing.
_SAME_FIRING = sa.text(
    "INSERT INTO occurrences (id, job_id, job_revision, trigger_key, idempotency_key,"
    " scheduled_for, status, attempt, max_attempts, fence, available_at, queue, kind,"
    " delivery, exclusive, definition, cancel_requested, chain_depth, created_at, updated_at)"
    " VALUES (:id, 'j', 1, :trigger, :key, 1, 'queued', 0, 3, 0, 1, 'default', 'callable',"
    " 'at-least-once', false, '{}', false, 0, 1, 1)"
)


def _unique_keys(conn: sa.Connection) -> set[tuple[str, ...]]:
    """The columns of each unique constraint of ``occurrences``."""
    if conn.dialect.name == "postgresql":
        constraints = sa.inspect(conn).get_unique_constraints("occurrences")
        return {tuple(c["column_names"]) for c in constraints}
    listed = conn.exec_driver_sql("PRAGMA index_list('occurrences')").all()
    return {
        tuple(c[2] for c in conn.exec_driver_sql(f"PRAGMA index_info('{index[1]}')"))
        for index in listed
        if index[3] == "u"
    }


def test_upgrade_from_0027_drops_the_idempotency_key_index_and_keeps_every_row(
    kernel_url: str,
) -> None:
    with revisions(kernel_url) as db:
        db.upgrade("0027")
        insert_occurrences(db.conn, _ROWS)
        before = db.conn.execute(sa.text("SELECT * FROM occurrences ORDER BY id")).all()
        indexes = occurrence_indexes(db.conn)
        assert ("idempotency_key",) in _unique_keys(db.conn)

        db.upgrade("0028")
        assert db.conn.execute(sa.text("SELECT * FROM occurrences ORDER BY id")).all() == before
        assert _unique_keys(db.conn) == {("job_id", "trigger_key")}
        assert occurrence_indexes(db.conn) == indexes - {"occurrences_idempotency_key"}
        db.upgrade("head")  # the shape of a fresh database once the later revisions ran
        assert live_shape(db.conn) == expected_shape(db.conn.dialect.name, HEAD_REVISION)
        db.downgrade("0028")
        with pytest.raises(sa.exc.IntegrityError), db.conn.begin_nested():
            db.conn.execute(_SAME_FIRING, {"id": 10, "trigger": "t1", "key": "other"})
        # Nothing the kernel writes reaches this; only the downgrade must refuse it again.
        db.conn.execute(_SAME_FIRING, {"id": 11, "trigger": "t11", "key": "t1"})
        db.conn.execute(sa.text("DELETE FROM occurrences WHERE id = 11"))

        db.downgrade("0027")
        assert db.conn.execute(sa.text("SELECT * FROM occurrences ORDER BY id")).all() == before
        assert occurrence_indexes(db.conn) == indexes
        assert ("idempotency_key",) in _unique_keys(db.conn)
        with pytest.raises(sa.exc.IntegrityError), db.conn.begin_nested():
            db.conn.execute(_SAME_FIRING, {"id": 12, "trigger": "t12", "key": "t1"})
