"""The Beat registry's statements: a heartbeat, a clean deregistration, forgetting the silent."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import bindparam as p
from sqlalchemy.dialects import postgresql, sqlite

from kernel.schema import beats

__all__ = ["TOUCH_BEAT", "REGISTER_BEAT", "DEREGISTER_BEAT", "FORGET_SILENT_BEATS"]

#: A registered Beat ticked: zero rows when it is not registered (REGISTER_BEAT then).
TOUCH_BEAT = (
    sa.update(beats)
    .where(beats.c.id == p("beat_id"))
    .values(last_tick_at=p("now"), interval_s=p("interval_s"), host=p("host"))
)


def _register(insert: Any) -> Any:
    """A Beat's first tick; a concurrent first tick of the same id already registered it."""
    return (
        insert(beats)
        .values(
            id=p("beat_id"),
            host=p("host"),
            interval_s=p("interval_s"),
            started_at=p("now"),
            last_tick_at=p("now"),
        )
        .on_conflict_do_nothing()
    )


REGISTER_BEAT = {"postgresql": _register(postgresql.insert), "sqlite": _register(sqlite.insert)}

#: A Beat that stops cleanly; zero rows when it was not registered.
DEREGISTER_BEAT = sa.delete(beats).where(beats.c.id == p("beat_id")).returning(beats.c.host)

#: Beats whose last tick is before ``silent_since``.
FORGET_SILENT_BEATS = (
    sa.delete(beats)
    .where(beats.c.last_tick_at < p("silent_since"))
    .returning(beats.c.id, beats.c.host, beats.c.last_tick_at)
)
