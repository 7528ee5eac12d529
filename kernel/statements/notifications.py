"""Notifications' statements: record one with the change that causes it, take a try, end it.

Each decides in its own WHERE: a notification is recorded only while its occurrence is
at the fence and in a status the change made (read in the change's own transaction) and
only once per run and event (unique ``occurrence_id, fence, event``); a try is taken
only while pending and due, and ended only by the token that took it.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import bindparam as p
from sqlalchemy.dialects import postgresql, sqlite

from kernel.db.schema import notifications, occurrences

__all__ = [
    "RECORD_NOTIFICATION",
    "TAKE_NOTIFICATION_TRY",
    "NOTIFICATION_DELIVERED",
    "NOTIFICATION_TRY_FAILED",
]

N = notifications
OCC = occurrences

_COLUMNS = (
    "occurrence_id",
    "fence",
    "job_id",
    "event",
    "state",
    "tries",
    "next_at",
    "target",
    "body",
    "created_at",
    "updated_at",
)


def _record(insert: Any) -> Any:
    """A pending notification ``event`` of the run (``occurrence_id``, ``fence``), only
    while the occurrence is at that fence in one of ``statuses`` and the run has no
    notification of that event yet."""
    values = sa.select(
        OCC.c.id,
        OCC.c.fence,
        OCC.c.job_id,
        p("event", type_=sa.String),
        sa.literal("pending"),
        sa.literal(0),
        p("now", type_=sa.BigInteger),
        p("target", type_=sa.Text),
        p("body", type_=sa.Text),
        p("now", type_=sa.BigInteger),
        p("now", type_=sa.BigInteger),
    ).where(
        OCC.c.id == p("occurrence_id"),
        OCC.c.fence == p("fence"),
        OCC.c.status.in_(p("statuses", expanding=True)),
    )
    return (
        insert(N)
        .from_select(list(_COLUMNS), values)
        .on_conflict_do_nothing(index_elements=[N.c.occurrence_id, N.c.fence, N.c.event])
        .returning(N.c.id)
    )


RECORD_NOTIFICATION = {"postgresql": _record(postgresql.insert), "sqlite": _record(sqlite.insert)}

#: Take one try: only a pending, due notification; a fresh token names the try.
TAKE_NOTIFICATION_TRY = (
    sa.update(N)
    .where(N.c.id == p("notification_id"), N.c.state == "pending", N.c.next_at <= p("now"))
    .values(state="delivering", token=p("token"), tries=N.c.tries + 1, updated_at=p("now"))
    .returning(*N.c)
)
#: End the try the token names: delivered.
NOTIFICATION_DELIVERED = (
    sa.update(N)
    .where(N.c.id == p("notification_id"), N.c.state == "delivering", N.c.token == p("try_token"))
    .values(state="delivered", token=None, last_error=None, updated_at=p("now"))
    .returning(N.c.occurrence_id, N.c.fence, N.c.tries)
)
#: End the try the token names: failed. Pending again while retryable with tries left.
NOTIFICATION_TRY_FAILED = (
    sa.update(N)
    .where(N.c.id == p("notification_id"), N.c.state == "delivering", N.c.token == p("try_token"))
    .values(
        state=sa.case(
            (sa.and_(p("retryable", type_=sa.Boolean), N.c.tries < p("attempts")), "pending"),
            else_="failed",
        ),
        next_at=p("next_at"),
        token=None,
        last_error=p("error"),
        updated_at=p("now"),
    )
    .returning(N.c.occurrence_id, N.c.fence, N.c.tries, N.c.state)
)
