"""Revision 0029 upgrades a 0028 database holding occurrences: ``occurrences_prunable``
and ``occurrences_settled_status`` give way to ``occurrences_settled_by_status``, which
holds every settled row (the dead letters too) and no unsettled one; every row and id is
kept; a downgrade makes the two indexes again."""

from __future__ import annotations

import sqlalchemy as sa

from kernel.db.engine import HEAD_REVISION
from kernel.db.schema_shape import expected_shape, live_shape
from tests.kernel.migrating import insert_occurrences, occurrence_indexes, revisions

_ROWS = [
    ("queued", None, None, None),
    ("running", "w", 10**13, None),
    ("succeeded", None, None, 5),
    ("dead_letter", None, None, 6),
    ("cancelled", None, None, 7),
    ("skipped", None, None, 8),
]
_NEW = "occurrences_settled_by_status"
_OLD = {"occurrences_prunable", "occurrences_settled_status"}


def _ids_through_the_new_index(conn: sa.Connection, status: str) -> list[int]:
    """The ids of ``status``'s settled rows, read through ``occurrences_settled_by_status``
    only (SQLite: INDEXED BY refuses a plan without it; PostgreSQL: no other way in)."""
    where = (
        "lower(status) IN ('succeeded', 'dead_letter', 'cancelled', 'skipped')"
        " AND lower(status) = :status"
    )
    if conn.dialect.name == "sqlite":
        query = f"SELECT id FROM occurrences INDEXED BY {_NEW} WHERE {where} ORDER BY settled_at"
        return list(conn.execute(sa.text(query), {"status": status}).scalars())
    conn.execute(sa.text("SET LOCAL enable_seqscan = off"))
    conn.execute(sa.text("SET LOCAL enable_bitmapscan = off"))
    query = f"SELECT id FROM occurrences WHERE {where} ORDER BY settled_at"
    plan = "\n".join(conn.execute(sa.text(f"EXPLAIN {query}"), {"status": status}).scalars())
    assert f"Index Scan using {_NEW}" in plan, plan
    ids = list(conn.execute(sa.text(query), {"status": status}).scalars())
    conn.execute(sa.text("RESET enable_seqscan"))
    conn.execute(sa.text("RESET enable_bitmapscan"))
    return ids


def test_upgrade_from_0028_holds_every_settled_row_in_one_index_and_downgrades(
    kernel_url: str,
) -> None:
    with revisions(kernel_url) as db:
        db.upgrade("0028")
        insert_occurrences(db.conn, _ROWS)
        before = db.conn.execute(sa.text("SELECT * FROM occurrences ORDER BY id")).all()
        indexes = occurrence_indexes(db.conn)
        assert indexes >= _OLD and _NEW not in indexes

        db.upgrade("0029")
        assert db.conn.execute(sa.text("SELECT * FROM occurrences ORDER BY id")).all() == before
        assert occurrence_indexes(db.conn) == indexes - _OLD | {_NEW}
        assert live_shape(db.conn) == expected_shape(db.conn.dialect.name, HEAD_REVISION)
        settled = {row[0]: i for i, row in enumerate(_ROWS, start=1) if row[3] is not None}
        for status, occ_id in settled.items():
            assert _ids_through_the_new_index(db.conn, status) == [occ_id]
        assert _ids_through_the_new_index(db.conn, "queued") == []

        db.downgrade("0028")
        assert db.conn.execute(sa.text("SELECT * FROM occurrences ORDER BY id")).all() == before
        assert occurrence_indexes(db.conn) == indexes
