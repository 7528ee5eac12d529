"""What a transition owes its job's ``notify``: the notification row, in its own transaction.

Every change that a job may subscribe to (``notify.on``, :mod:`kernel.spec.notify`) calls
:func:`notify` after its row's statement, whoever makes it: the worker's settle, a
lease's expiry (Beat's, or a claim's that meets it), an operator's or an adapter's
verdict, the watchdog's finding. The notification is then committed with the change or
not at all: no crash between the two loses it, and no rolled-back change notifies.

The INSERT (``RECORD_NOTIFICATION``) writes only while the occurrence is at the run's
fence in a status the change made, and only once per run and event (unique
``occurrence_id, fence, event``), so a change replayed or made twice notifies once.
Delivery is the worker's (``kernel.notify``, one guarded try at a time).

:func:`owe_result` uses the same outbox for an implicit subscriber: a run enqueued with a
key of a ``task`` job (the id a routed Celery call gave its caller) that ends without its
worker's answer (a lease lost for good, an operator's abandon, a cancel, a skip) owes that
end to the app's result backend, or the caller's result would wait forever. The row
(target ``{"result_backend": true}``, event ``result``) is written with the end, once per
run and fence; the worker that delivers it writes the end as Celery shows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernel import statements as st
from kernel.events import EventType
from kernel.records import dumps, loads, to_dt
from kernel.spec.notify import Notify
from kernel.spec.task_runs import caller_key
from kernel.states import CLAIMABLE, FAILED, OccurrenceStatus
from kernel.transaction.tx import Tx
from kernel.types import iso_z

__all__ = ["RESULT_EVENT", "ended_unanswered", "notify", "owe_result"]

S = OccurrenceStatus
#: The statuses a run's change may notify as (``Notify.event_of``); others read nothing.
_NOTIFYING = frozenset({*FAILED, S.NEEDS_ADJUDICATION})
#: The statuses an occurrence may hold when the watchdog finds it so (its finding's
#: guard): overrun while running, stranded while waiting for a claim.
_FINDING_STATUSES = {
    "overrun": (S.RUNNING.value,),
    "stranded": tuple(s.value for s in CLAIMABLE),
}
#: The event of a run's end owed to the result backend (one per run and fence).
RESULT_EVENT = "result"
#: The ends a run's worker never writes to the result backend itself.
_OWED_ENDS = frozenset({S.DEAD_LETTER, S.CANCELLED, S.SKIPPED})
#: Tries of an owed result (the backend down), the first again after ``backoff`` seconds.
_RESULT_TARGET = {"result_backend": True, "attempts": 5, "backoff": 30.0}


def notify(
    tx: Tx, occurrence_id: int, fence: int, change: str, *, finding: bool = False
) -> int | None:
    """Record the notification of ``change`` to the run (``occurrence_id``, ``fence``)
    when its job's ``notify`` subscribes to it; its id, else None.

    ``change``: the status the run moved to (dead_letter, retry_wait,
    needs_adjudication: notified as ``dead_letter``, ``failed``, ``needs_adjudication``),
    or with ``finding`` the watchdog's finding (overrun, stranded); any other status
    notifies nothing.
    """
    if not finding and change not in _NOTIFYING:
        return None
    row = _read(tx, occurrence_id)
    return None if row is None else _notify(tx, row, fence, change, finding)


def owe_result(tx: Tx, occurrence_id: int, fence: int, end: str) -> int | None:
    """Record that the end (``end``: dead_letter, cancelled, skipped) of the run
    (``occurrence_id``, ``fence``) is owed to the result backend, when the run is a
    keyed enqueue of a ``task`` job; the row's id, else None.

    Callers are the changes a worker's body did not answer for: a lease's expiry, a
    verdict, a cancel (also the worker's settle of one: its body wrote nothing), a skip.
    """
    if end not in _OWED_ENDS:
        return None
    row = _read(tx, occurrence_id)
    return None if row is None else _owe(tx, row, fence, end)


def ended_unanswered(tx: Tx, occurrence_id: int, fence: int, end: str) -> None:
    """A run's end that its worker did not answer for (a lease's expiry, a verdict): its
    job's notification (:func:`notify`) and its result owed (:func:`owe_result`), from
    one read of its row."""
    if end not in _NOTIFYING and end not in _OWED_ENDS:
        return
    row = _read(tx, occurrence_id)
    if row is None:
        return
    if end in _NOTIFYING:
        _notify(tx, row, fence, end, False)
    if end in _OWED_ENDS:
        _owe(tx, row, fence, end)


def _read(tx: Tx, occurrence_id: int) -> Any:
    return tx.conn.execute(st.OCCURRENCE_BY_ID, {"occurrence_id": occurrence_id}).first()


def _notify(tx: Tx, row: Any, fence: int, change: str, finding: bool) -> int | None:
    spec = loads(row.definition).get("notify")
    if not spec:
        return None
    subscribed = Notify.model_validate(spec)
    event = subscribed.finding_of(change) if finding else subscribed.event_of(change)
    if event is None:
        return None
    statuses = _FINDING_STATUSES[change] if finding else (change,)
    return _record(tx, row, fence, statuses, event, subscribed.to_dict())


def _owe(tx: Tx, row: Any, fence: int, end: str) -> int | None:
    if caller_key(row.trigger_key) is None or loads(row.definition).get("kind") != "task":
        return None
    return _record(tx, row, fence, (end,), RESULT_EVENT, _RESULT_TARGET)


def _record(
    tx: Tx,
    row: Any,
    fence: int,
    statuses: tuple[str, ...],
    event: str,
    target: Mapping[str, Any],
) -> int | None:
    """Record the notification ``event`` of the run to ``target`` (guarded by the run's
    ``statuses`` at ``fence``, once per run and event); its id, else None."""
    made = tx.conn.execute(
        st.RECORD_NOTIFICATION[tx.dialect],
        {
            "occurrence_id": row.id,
            "fence": fence,
            "statuses": list(statuses),
            "event": event,
            "now": tx.now,
            "target": dumps(dict(target)),
            "body": dumps(_body(row._mapping, fence, event)),
        },
    ).scalar()
    if made is None:
        return None
    tx.emit(
        EventType.NOTIFICATION_RECORDED,
        job_id=row.job_id,
        occurrence_id=row.id,
        fence=fence,
        notification_id=made,
        notify_event=event,
    )
    return int(made)


def _body(o: Mapping[Any, Any], fence: int, event: str) -> dict[str, Any]:
    """What the notification delivers: the run, its status and its error as now."""
    return {
        "event": event,
        "job_id": o["job_id"],
        "occurrence_id": o["id"],
        "fence": fence,
        "attempt": o["attempt"],
        "trigger_key": o["trigger_key"],
        "scheduled_for": iso_z(to_dt(o["scheduled_for"])),
        "status": o["status"],
        "error": loads(o["last_error"]),
        "queue": o["queue"],
    }
