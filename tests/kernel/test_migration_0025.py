"""Revision 0025 upgrades a 0023 database holding a chord: the chord had every member
when it was made, so it is closed (at its creation), and its last member's settle still
makes its body; downgrading drops the column again."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from kernel.db.engine import create_kernel_engine
from kernel.db.schema import chords
from kernel.statements import CHORD_MEMBER_SUCCEEDS


def _config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", "kernel:migrations")
    return cfg


def test_upgrade_from_0023_closes_the_chords_made_and_downgrade_drops_the_column(
    kernel_url: str,
) -> None:
    cfg = _config()
    engine = create_kernel_engine(kernel_url)
    try:
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "0023")
            conn.execute(
                sa.text(
                    "INSERT INTO chords (id, members, body, remaining, created_at)"
                    " VALUES ('g', '[1]', '{}', 1, 5)"
                )
            )
            command.upgrade(cfg, "0025")
            assert conn.execute(sa.select(chords.c.closed_at)).scalar_one() == 5
            # Its last member's settle reads it closed: that settle makes the body.
            counted = conn.execute(CHORD_MEMBER_SUCCEEDS, {"chord_id": "g", "now": 9}).one()
            assert (counted.remaining, counted.closed_at) == (0, 5)
            command.downgrade(cfg, "0023")
            columns = {c["name"] for c in sa.inspect(conn).get_columns("chords")}
        assert "closed_at" not in columns and "remaining" in columns
    finally:
        engine.dispose()
