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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernel import statements as st
from kernel.events import EventType
from kernel.records import dumps, loads, to_dt
from kernel.spec.notify import Notify
from kernel.states import CLAIMABLE, FAILED, OccurrenceStatus
from kernel.transaction.tx import Tx
from kernel.types import iso_z

__all__ = ["notify"]

S = OccurrenceStatus
#: The statuses a run's change may notify as (``Notify.event_of``); others read nothing.
_NOTIFYING = frozenset({*FAILED, S.NEEDS_ADJUDICATION})
#: The statuses an occurrence may hold when the watchdog finds it so (its finding's
#: guard): overrun while running, stranded while waiting for a claim.
_FINDING_STATUSES = {
    "overrun": (S.RUNNING.value,),
    "stranded": tuple(s.value for s in CLAIMABLE),
}


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
    row = tx.conn.execute(st.OCCURRENCE_BY_ID, {"occurrence_id": occurrence_id}).first()
    spec = None if row is None else loads(row.definition).get("notify")
    if row is None or not spec:
        return None
    subscribed = Notify.model_validate(spec)
    event = subscribed.finding_of(change) if finding else subscribed.event_of(change)
    if event is None:
        return None
    statuses = _FINDING_STATUSES[change] if finding else (change,)
    made = tx.conn.execute(
        st.RECORD_NOTIFICATION[tx.dialect],
        {
            "occurrence_id": occurrence_id,
            "fence": fence,
            "statuses": list(statuses),
            "event": event,
            "now": tx.now,
            "target": dumps(subscribed.to_dict()),
            "body": dumps(_body(row._mapping, fence, event)),
        },
    ).scalar()
    if made is None:
        return None
    tx.emit(
        EventType.NOTIFICATION_RECORDED,
        job_id=row.job_id,
        occurrence_id=occurrence_id,
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
