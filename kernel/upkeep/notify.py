"""Notifications (a job's ``notify``): delivered at most once, claimed per try.

A notification is recorded by the change that causes it, in that change's transaction
(:mod:`kernel.transitions.notices`), once per run and event. A try is claimed by one
guarded UPDATE (``pending`` and due -> ``delivering`` with a fresh token,
:func:`claim`), and only the token's holder ends it (:func:`delivered`,
:func:`try_failed`), so two workers never deliver the same notification. A failed try
is tried again ``backoff * 2**(tries-1)`` later while tries remain, decided in the
statement; each step appends its event. Nothing here touches the occurrence: a
notification never holds up a run or its settle.
"""

from __future__ import annotations

import secrets
from typing import Any

import sqlalchemy as sa

from kernel import statements as st
from kernel.db.schema import notifications
from kernel.errors import NotFound, StateConflict
from kernel.events import EventType
from kernel.records import loads, to_dt
from kernel.reports import Notification
from kernel.transaction.tx import Tx

__all__ = ["claim", "delivered", "due", "get", "of_run", "try_failed"]

N = notifications
_TRY_TOKEN_BYTES = 12


def _notification(row: Any) -> Notification:
    next_at = to_dt(row.next_at)
    assert next_at is not None
    return Notification(
        id=row.id,
        occurrence_id=row.occurrence_id,
        fence=row.fence,
        job_id=row.job_id,
        event=row.event,
        state=row.state,
        tries=row.tries,
        next_at=next_at,
        token=row.token,
        target=loads(row.target),
        body=loads(row.body),
        last_error=row.last_error,
    )


def claim(tx: Tx, notification_id: int) -> Notification | None:
    """Start a try of a pending, due notification; None when it is not (another worker
    took it, it was delivered or given up, or it is not due yet)."""
    token = secrets.token_hex(_TRY_TOKEN_BYTES)
    row = tx.conn.execute(
        st.TAKE_NOTIFICATION_TRY,
        {"notification_id": notification_id, "token": token, "now": tx.now},
    ).first()
    return None if row is None else _notification(row)


def _refused(tx: Tx, notification_id: int) -> StateConflict | NotFound:
    """Why a try's end was refused (read once, after the guarded statement found nothing)."""
    row = tx.conn.execute(sa.select(N.c.state).where(N.c.id == notification_id)).first()
    if row is None:
        return NotFound(f"notification {notification_id} does not exist")
    return StateConflict(
        f"notification {notification_id} is {row.state}: this try no longer holds it"
    )


def delivered(tx: Tx, notification_id: int, token: str) -> None:
    """End the try ``token`` names: delivered.

    Raises:
        StateConflict: the try no longer holds the notification. NotFound: no such one.
    """
    row = tx.conn.execute(
        st.NOTIFICATION_DELIVERED,
        {"notification_id": notification_id, "try_token": token, "now": tx.now},
    ).first()
    if row is None:
        raise _refused(tx, notification_id)
    tx.emit(
        EventType.NOTIFICATION_DELIVERED,
        occurrence_id=row.occurrence_id,
        fence=row.fence,
        notification_id=notification_id,
        tries=row.tries,
    )


def try_failed(
    tx: Tx,
    notification: Notification,
    *,
    error: str,
    retryable: bool,
) -> Notification:
    """End the try ``notification.token`` names: failed. Tried again after the backoff
    while ``retryable`` and tries remain, else given up.

    Raises:
        StateConflict: the try no longer holds the notification. NotFound: no such one.
    """
    target = notification.target
    delay_ms = int(float(target["backoff"]) * 1000 * 2 ** max(notification.tries - 1, 0))
    params = {
        "notification_id": notification.id,
        "try_token": notification.token,
        "retryable": retryable,
        "attempts": int(target["attempts"]),
        "next_at": tx.now + delay_ms,
        "error": error,
        "now": tx.now,
    }
    row = tx.conn.execute(st.NOTIFICATION_TRY_FAILED, params).first()
    if row is None:
        raise _refused(tx, notification.id)
    gave_up = row.state == "failed"
    retry: dict[str, Any] = {} if gave_up else {"next_at": tx.now + delay_ms}
    tx.emit(
        EventType.NOTIFICATION_FAILED,
        occurrence_id=row.occurrence_id,
        fence=row.fence,
        notification_id=notification.id,
        tries=row.tries,
        error=error,
        gave_up=gave_up,
        **retry,
    )
    return get(tx, notification.id)


def get(tx: Tx, notification_id: int) -> Notification:
    """One notification.

    Raises:
        NotFound: no such notification.
    """
    row = tx.conn.execute(sa.select(N).where(N.c.id == notification_id)).first()
    if row is None:
        raise NotFound(f"notification {notification_id} does not exist")
    return _notification(row)


def due(tx: Tx, limit: int, overdue_ms: int = 0) -> list[Notification]:
    """Pending notifications whose next try has been due for ``overdue_ms`` at least,
    oldest first (at most ``limit``)."""
    rows = tx.conn.execute(
        sa.select(N)
        .where(N.c.state == "pending", N.c.next_at <= tx.now - overdue_ms)
        .order_by(N.c.next_at)
        .limit(limit)
    )
    return [_notification(row) for row in rows]


def of_run(tx: Tx, occurrence_id: int, fence: int | None) -> list[Notification]:
    """The pending notifications of the run (``occurrence_id``, ``fence``; None: any of
    its runs), oldest first."""
    run = N.c.occurrence_id == occurrence_id
    if fence is not None:
        run &= N.c.fence == fence
    rows = tx.conn.execute(sa.select(N).where(run, N.c.state == "pending").order_by(N.c.id))
    return [_notification(row) for row in rows]
