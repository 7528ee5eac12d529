"""Beat heartbeats: each Beat records its ticks; the CLI lists who is alive."""

from __future__ import annotations

import sqlalchemy as sa

from kernel.records import beat_from_row
from kernel.schema import beats
from kernel.tx import Tx
from kernel.types import Beat

__all__ = ["record_beat", "list_beats"]


def record_beat(tx: Tx, beat_id: str, host: str, interval_s: float) -> None:
    changed = tx.conn.execute(
        sa.update(beats)
        .where(beats.c.id == beat_id)
        .values(last_tick_at=tx.now, interval_s=interval_s, host=host)
    ).rowcount
    if changed == 0:
        tx.conn.execute(
            tx.insert_or_ignore(beats).values(
                id=beat_id, host=host, interval_s=interval_s, started_at=tx.now, last_tick_at=tx.now
            )
        )


def list_beats(tx: Tx) -> list[Beat]:
    return [beat_from_row(r) for r in tx.conn.execute(sa.select(beats).order_by(beats.c.id))]
