"""Following the event log by commit: a cursor that a late commit cannot pass.

Event ids come from a sequence. On PostgreSQL a transaction that took ids 1 and 2 can
commit after another committed id 3, so "events after the last id seen" skips 1 and 2
for good. A follower therefore remembers what it has *seen*, as a PostgreSQL snapshot
(``pg_current_snapshot()``): every event whose writing transaction (``events.xact``) is
visible in that snapshot has been delivered. A read takes a new snapshot ``upto`` and
delivers the events visible in ``upto`` and not in ``seen`` — exactly the transactions
that committed in between, whatever their ids — oldest id first, a page at a time; when
the batch is exhausted ``upto`` becomes ``seen``. So each event is delivered once, in the
order its transaction became visible (by id within one poll), and a transaction left open
for an hour holds back only its own events, not the stream.

SQLite serialises its writers, so its ids commit in order and the cursor is the last id.

A cursor travels as a token (``EventCursor.token``): ``"42"`` on SQLite (an event id, as
``events --after`` always took), ``"42@SEEN"`` or ``"42@SEEN@UPTO"`` on PostgreSQL.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

import sqlalchemy as sa

from kernel.db.schema import events
from kernel.errors import InvalidArgument
from kernel.reads import MAX_LIST
from kernel.records import event_from_row, from_dt
from kernel.transaction.tx import Tx
from kernel.types import Event

__all__ = ["EventCursor", "cursor_now", "follow_events"]

_ID = re.compile(r"[0-9]{1,19}")
_SNAPSHOT = re.compile(r"([0-9]{1,19}):([0-9]{1,19}):([0-9]{1,19}(?:,[0-9]{1,19})*)?")
_BIG = 2**63 - 1


@dataclass(frozen=True, slots=True)
class EventCursor:
    """Where a follower of the event log stands; pass the one a read returns to the next.

    ``after_id``: events up to this id are behind the cursor (within the batch being
    paged, on PostgreSQL). ``seen``: a PostgreSQL snapshot whose transactions' events were
    all delivered (None: none yet, ``after_id`` is the floor). ``upto``: the snapshot
    bounding the batch being paged (None: take a new one at the next read).
    """

    after_id: int = 0
    seen: str | None = None
    upto: str | None = None
    #: A longer token is refused; a snapshot lists the transactions in progress, a few
    #: dozen ids on a busy server.
    MAX_TOKEN: ClassVar[int] = 8192

    @property
    def token(self) -> str:
        """The cursor as text, for a command line, a JSON field or an SSE id."""
        if self.seen is None and self.upto is None:
            return str(self.after_id)
        tail = f"@{self.upto}" if self.upto is not None else ""
        return f"{self.after_id}@{self.seen or ''}{tail}"

    def past(self, event_id: int, page_end: EventCursor) -> EventCursor:
        """The cursor just past ``event_id``, one of the events a read from this cursor
        returned with ``page_end``: a follower that stops there resumes after it."""
        upto = page_end.upto if page_end.upto is not None else page_end.seen
        return EventCursor(event_id, self.seen, upto)

    @classmethod
    def parse(cls, token: str) -> EventCursor:
        """The cursor a :attr:`token` stands for (an event id alone is one).

        Raises:
            InvalidArgument: (``cursor``) not a token this module wrote.
        """
        parts = token.split("@") if len(token) <= cls.MAX_TOKEN else []
        after, *snapshots = parts or [""]
        if not _ID.fullmatch(after) or int(after) > _BIG or len(snapshots) > 2:
            raise InvalidArgument("cursor", f"{token[:60]!r}: expected an event id or a cursor")
        seen = snapshots[0] if snapshots else None
        upto = snapshots[1] if len(snapshots) == 2 else None
        if seen == "" and upto is not None:
            seen = None
        if not all(_is_snapshot(s) for s in (seen, upto) if s is not None):
            raise InvalidArgument("cursor", f"{token[:60]!r}: not a cursor this kernel wrote")
        return cls(int(after), seen, upto)


def _is_snapshot(text: str) -> bool:
    """``text`` is a snapshot as PostgreSQL writes one: 0 < xmin <= xmax, the ids in
    progress ascending between them (anything else its cast would refuse)."""
    found = _SNAPSHOT.fullmatch(text)
    if found is None:
        return False
    xmin, xmax = int(found[1]), int(found[2])
    running = [int(x) for x in found[3].split(",")] if found[3] else []
    return 0 < xmin <= xmax <= _BIG and all(
        xmin <= x < xmax and (i == 0 or running[i - 1] <= x) for i, x in enumerate(running)
    )


def cursor_now(tx: Tx) -> EventCursor:
    """A cursor past every event committed now: where a follow of new events starts."""
    if _postgres(tx):
        return EventCursor(seen=_snapshot(tx))
    newest = tx.conn.execute(sa.select(sa.func.coalesce(sa.func.max(events.c.id), 0)))
    return EventCursor(after_id=int(newest.scalar_one()))


def follow_events(
    tx: Tx,
    cursor: EventCursor,
    *,
    job_id: str | None,
    occurrence_id: int | None,
    types: Sequence[str] | None,
    since: datetime | None,
    limit: int,
) -> tuple[list[Event], EventCursor]:
    """The events committed past ``cursor`` (at most ``limit``, filtered as
    :func:`kernel.reads.read_events` filters), and the cursor past them.

    Raises:
        InvalidArgument: (``cursor``) a PostgreSQL cursor given to a SQLite kernel.
    """
    query = sa.select(events).where(events.c.id > cursor.after_id)
    if job_id is not None:
        query = query.where(events.c.job_id == job_id)
    if occurrence_id is not None:
        query = query.where(events.c.occurrence_id == occurrence_id)
    if types:
        query = query.where(events.c.type.in_(list(types)))
    if since is not None:
        query = query.where(events.c.at >= from_dt(since))
    if not _postgres(tx):
        if cursor.seen is not None or cursor.upto is not None:
            raise InvalidArgument("cursor", "a PostgreSQL cursor cannot follow a SQLite kernel")
        found = _page(tx, query, limit)
        return found, EventCursor(found[-1].id if found else cursor.after_id)
    upto = cursor.upto or _snapshot(tx)
    query = query.where(_visible(upto))
    if cursor.seen is not None:
        # Only transactions the last snapshot did not see: the index finds those at or
        # above its xmin.
        xmin = sa.func.pg_snapshot_xmin(sa.cast(cursor.seen, _PG_SNAPSHOT))
        query = query.where(events.c.xact >= _bigint(xmin), sa.not_(_visible(cursor.seen)))
    found = _page(tx, query, limit)
    if len(found) == limit:
        return found, EventCursor(found[-1].id, cursor.seen, upto)
    return found, EventCursor(seen=upto)


class _PgType(sa.types.UserDefinedType[str]):
    """A PostgreSQL type SQLAlchemy has no name for (``pg_snapshot``, ``xid8``)."""

    cache_ok = True

    def __init__(self, name: str) -> None:
        self.name = name

    def get_col_spec(self, **kw: Any) -> str:
        return self.name


_PG_SNAPSHOT, _XID8 = _PgType("pg_snapshot"), _PgType("xid8")


def _bigint(xid8: sa.ColumnElement[Any]) -> sa.ColumnElement[int]:
    return sa.cast(sa.cast(xid8, sa.Text), sa.BigInteger)


#: No transaction that wrote a row this statement sees can have started after it.
_NEWER_THAN_ANY = _bigint(sa.func.pg_snapshot_xmax(sa.func.pg_current_snapshot()))


def _visible(snapshot: str) -> sa.ColumnElement[bool]:
    """The event's transaction is visible in ``snapshot``.

    Always for a row older than revision 0012 (NULL), and for a row whose id is past
    every transaction this server has started: it was restored from a dump of another
    cluster, its transaction committed there.
    """
    xact = sa.cast(sa.cast(events.c.xact, sa.Text), _XID8)
    return sa.or_(
        events.c.xact.is_(None),
        events.c.xact >= _NEWER_THAN_ANY,
        sa.func.pg_visible_in_snapshot(xact, sa.cast(snapshot, _PG_SNAPSHOT), type_=sa.Boolean),
    )


def _page(tx: Tx, query: sa.Select[tuple[object, ...]], limit: int) -> list[Event]:
    if not 1 <= limit <= MAX_LIST:
        raise InvalidArgument("limit", f"must be between 1 and {MAX_LIST}")
    return [event_from_row(r) for r in tx.conn.execute(query.order_by(events.c.id).limit(limit))]


def _snapshot(tx: Tx) -> str:
    return str(tx.conn.execute(sa.text("SELECT pg_current_snapshot()::text")).scalar_one())


def _postgres(tx: Tx) -> bool:
    return tx.conn.dialect.name == "postgresql"
