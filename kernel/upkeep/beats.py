"""The Beat registry: heartbeats, clean deregistration, and forgetting Beats gone silent."""

from __future__ import annotations

import sqlalchemy as sa

from kernel import statements as st
from kernel.db.schema import beats
from kernel.events import EventType
from kernel.records import beat_from_row
from kernel.transaction.tx import Tx
from kernel.types import Beat

__all__ = ["record_beat", "list_beats", "deregister_beat", "forget_silent_beats"]


def record_beat(tx: Tx, beat_id: str, host: str, interval_s: float) -> None:
    params = {"beat_id": beat_id, "host": host, "interval_s": interval_s, "now": tx.now}
    if tx.conn.execute(st.TOUCH_BEAT, params).rowcount == 0:
        tx.conn.execute(st.REGISTER_BEAT[tx.dialect], params)


def list_beats(tx: Tx) -> list[Beat]:
    return [beat_from_row(r) for r in tx.conn.execute(sa.select(beats).order_by(beats.c.id))]


def deregister_beat(tx: Tx, beat_id: str) -> bool:
    """Remove a Beat that stops cleanly; False when it was not registered."""
    gone = tx.conn.execute(st.DEREGISTER_BEAT, {"beat_id": beat_id}).first()
    if gone is None:
        return False
    tx.emit(EventType.BEAT_STOPPED, beat_id=beat_id, host=gone.host)
    return True


def forget_silent_beats(tx: Tx, silent_for_ms: int) -> list[str]:
    """Remove Beats whose last tick is older than ``silent_for_ms``, one event each."""
    silent_since = tx.now - silent_for_ms
    forgotten = tx.conn.execute(st.FORGET_SILENT_BEATS, {"silent_since": silent_since}).all()
    for row in forgotten:
        tx.emit(
            EventType.BEAT_FORGOTTEN,
            beat_id=row.id,
            host=row.host,
            last_tick_at=row.last_tick_at,
            silent_for_ms=silent_for_ms,
        )
    return sorted(row.id for row in forgotten)
