"""Revision 0025 upgrades a 0023 database holding a chord: the chord had every member
when it was made, so it is closed (at its creation), and its last member's settle still
makes its body; downgrading drops the column again."""

from __future__ import annotations

import sqlalchemy as sa

from kernel.db.schema import chords
from kernel.statements import CHORD_MEMBER_SUCCEEDS
from tests.kernel.migrating import revisions


def test_upgrade_from_0023_closes_the_chords_made_and_downgrade_drops_the_column(
    kernel_url: str,
) -> None:
    with revisions(kernel_url) as db:
        db.upgrade("0023")
        db.conn.execute(
            sa.text(
                "INSERT INTO chords (id, members, body, remaining, created_at)"
                " VALUES ('g', '[1]', '{}', 1, 5)"
            )
        )
        db.upgrade("0025")
        assert db.conn.execute(sa.select(chords.c.closed_at)).scalar_one() == 5
        # Its last member's settle reads it closed: that settle makes the body.
        counted = db.conn.execute(CHORD_MEMBER_SUCCEEDS, {"chord_id": "g", "now": 9}).one()
        assert (counted.remaining, counted.closed_at) == (0, 5)
        db.downgrade("0023")
        columns = {c["name"] for c in sa.inspect(db.conn).get_columns("chords")}
    assert "closed_at" not in columns and "remaining" in columns
