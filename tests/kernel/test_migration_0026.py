"""Revision 0026 upgrades a 0025 database holding occurrences in every settled and unsettled
shape: PostgreSQL's checks are replaced by their compact spelling (the rows validated
against it), SQLite's are untouched; downgrading restores the spelling before."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from kernel.db.engine import HEAD_REVISION
from kernel.db.schema_shape import expected_shape
from tests.kernel.migrating import A_JOB, AN_OCCURRENCE, revisions

_FIELDS = ("status", "owner", "until", "cancel", "settled")
_ROWS = [
    ("queued", None, None, False, None),
    ("running", "w", 10**13, True, None),
    ("succeeded", None, None, False, 5),
    ("cancelled", None, None, True, 5),
    ("needs_adjudication", None, None, True, None),
]


def _checks(conn: sa.Connection) -> dict[str, str]:
    return dict(
        conn.execute(
            sa.text(
                "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
                " WHERE conrelid = 'occurrences'::regclass AND contype = 'c'"
            )
        ).all()
    )


def _sqlite_table(conn: sa.Connection) -> Any:
    return conn.execute(
        sa.text("SELECT sql FROM sqlite_master WHERE name = 'occurrences'")
    ).scalar_one()


def test_upgrade_from_0025_spells_postgresql_s_checks_compactly_and_downgrade_restores_them(
    kernel_url: str,
) -> None:
    with revisions(kernel_url) as db:
        db.upgrade("0025")
        db.conn.execute(A_JOB)
        db.conn.execute(
            AN_OCCURRENCE,
            [
                dict(zip(_FIELDS, row, strict=True), id=i, key=f"t{i}")
                for i, row in enumerate(_ROWS, start=1)
            ],
        )
        postgres = db.conn.dialect.name == "postgresql"
        before = _checks(db.conn) if postgres else _sqlite_table(db.conn)
        db.upgrade("0026")
        after = _checks(db.conn) if postgres else _sqlite_table(db.conn)
        if postgres:
            # As a fresh database has them (kernel/migrations/shape.json), each one new but
            # the counters' bounds.
            shape = expected_shape("postgresql", HEAD_REVISION) or {}
            assert after == {n: shape[f"constraint occurrences.{n}"] for n in after}
            assert {n for n in after if after[n] != before[n]} == set(after) - {
                "ck_occurrences_counters"
            }
        else:
            assert after == before
        assert db.conn.execute(sa.text("SELECT count(*) FROM occurrences")).scalar_one() == 5
        db.downgrade("0025")
        assert (_checks(db.conn) if postgres else _sqlite_table(db.conn)) == before
