"""Operator actions on occurrences: cancel, requeue, and Celery's revoke of routed runs.

Cancel and requeue are idempotent by request id (SPEC I7,
:func:`kernel.occurrences.rows.record_request`); a revoke by its guarded cancel, which
moves a run once however many workers carry out the same broadcast. Pause and resume are
in :mod:`kernel.occurrences.pausing`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from kernel import statements as st
from kernel.errors import (
    EvidenceConflict,
    FenceConflict,
    StateConflict,
)
from kernel.events import EventType
from kernel.occurrences.chains import cancelled_links
from kernel.occurrences.control import request_cancel
from kernel.occurrences.rows import grant, occurrence_row, record_request
from kernel.records import dumps, loads
from kernel.spec.task_runs import caller_key, keyed_trigger
from kernel.states import OccurrenceStatus
from kernel.transaction.tx import Tx
from kernel.transitions import door
from kernel.transitions import occurrences as T

__all__ = [
    "Revoked",
    "requeue",
    "cancel",
    "revoke",
    "revoke_stamped",
    "stamps_match",
    "carries_stamps",
]

S = OccurrenceStatus


def requeue(
    tx: Tx,
    occurrence_id: int,
    *,
    expected_fence: int | None,
    expected_error_code: str | None,
    request_id: str,
    operator: str,
) -> bool:
    """Give a dead letter one more claim, consuming no attempt, if the given evidence holds."""
    evidence = {"fence": expected_fence, "error_code": expected_error_code}
    if record_request(tx, request_id, "requeue", str(occurrence_id), evidence, operator):
        return True
    revived = door.run(
        tx,
        T.OPERATOR_REQUEUES,
        {
            "occurrence_id": occurrence_id,
            "expected_fence": expected_fence,
            "expected_error_code": expected_error_code,
            "now": tx.now,
        },
    )
    if revived is None:
        o = occurrence_row(tx, occurrence_id)
        actual_code = (loads(o["last_error"]) or {}).get("code")
        if o["status"] != S.DEAD_LETTER:
            raise StateConflict(
                f"occurrence {occurrence_id} is {o['status']}, not dead_letter",
                occurrence_id=occurrence_id,
                status=o["status"],
            )
        if expected_fence is not None and o["fence"] != expected_fence:
            raise FenceConflict(
                f"occurrence {occurrence_id} is at fence {o['fence']}, not {expected_fence}",
                occurrence_id=occurrence_id,
                expected_fence=expected_fence,
                actual_fence=o["fence"],
            )
        if expected_error_code is None or actual_code == expected_error_code:
            # The guard holds now but did not when REQUEUE ran: it became a dead
            # letter meanwhile (PostgreSQL READ COMMITTED). This request came first.
            raise StateConflict(
                f"occurrence {occurrence_id} was not yet a dead letter when the requeue arrived; "
                "retry with a new request id",
                occurrence_id=occurrence_id,
                status=o["status"],
            )
        raise EvidenceConflict(
            f"occurrence {occurrence_id} failed with {actual_code!r}, not {expected_error_code!r}",
            occurrence_id=occurrence_id,
            expected_error_code=expected_error_code,
            actual_error_code=actual_code,
        )
    actual_code = (loads(revived.last_error) or {}).get("code")
    grant(tx, occurrence_id, request_id, revived.fence, actual_code)
    tx.emit(
        EventType.OCCURRENCE_REQUEUED,
        job_id=revived.job_id,
        occurrence_id=occurrence_id,
        fence=revived.fence,
        request_id=request_id,
        operator=operator,
        previous_error=actual_code,
    )
    return False


def cancel(tx: Tx, occurrence_id: int, *, request_id: str, operator: str) -> bool:
    """Cancel: at once when waiting; a running one is asked and its worker stops."""
    if record_request(tx, request_id, "cancel", str(occurrence_id), {}, operator):
        return True
    moved = request_cancel(tx, occurrence_id, reason=f"operator:{operator}")
    if moved == S.CANCELLED:
        cancelled_links(tx, occurrence_id)
    if moved is not None:
        return False
    o = occurrence_row(tx, occurrence_id)  # zero rows: read once for the precise answer
    if o["status"] != S.RUNNING:
        raise StateConflict(
            f"occurrence {occurrence_id} is {o['status']}; only queued, retry_wait, "
            "awaiting_approval or running occurrences can be cancelled",
            occurrence_id=occurrence_id,
            status=o["status"],
        )
    return False  # running and already asked to stop: this request joins that one


class Revoked(NamedTuple):
    """A routed run a revoke named: ``moved`` when this revoke cancelled it (``status``
    ``cancelled``) or asked it to stop (``running``); else ``status`` as it was found (it
    had ended, was asked already, or runs on: a revoke without terminate)."""

    occurrence_id: int
    task_id: str
    fence: int
    queue: str
    status: str
    moved: bool


def revoke(tx: Tx, task_ids: Sequence[str], *, terminate: bool, operator: str) -> list[Revoked]:
    """Celery's revoke of the routed runs its callers know by ``task_ids``: one not started
    is cancelled; a running one is asked to stop when ``terminate`` (else it finishes, as
    under Celery). Every routed run named is answered; ids of none are not."""
    revoked = []
    for task_id in task_ids:
        rows = tx.conn.execute(st.RUNS_BY_CALLER_KEY, {"trigger_key": keyed_trigger(task_id)})
        revoked += _revoke_rows(tx, list(rows), terminate, operator)
    return revoked


#: Runs a revoke by stamps reads per statement.
_STAMPED_PAGE = 500


def revoke_stamped(
    tx: Tx, stamps: Mapping[str, Any], *, terminate: bool, operator: str
) -> list[Revoked]:
    """Celery's revoke by stamped headers of routed runs: those not ended whose call's
    stamps match (:func:`stamps_match`), cancelled or stopped as :func:`revoke` does."""
    revoked: list[Revoked] = []
    after = 0
    while True:
        page = tx.conn.execute(st.STAMPED_RUNS, {"after_id": after, "limit": _STAMPED_PAGE}).all()
        matched = [row for row in page if carries_stamps(loads(row.definition), stamps)]
        revoked += _revoke_rows(tx, matched, terminate, operator)
        if len(page) < _STAMPED_PAGE:
            return revoked
        after = page[-1].id


def carries_stamps(definition: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether the run of ``definition`` was called with stamps matching ``wanted``
    (:func:`stamps_match`)."""
    request = (definition.get("payload") or {}).get("request") or {}
    return stamps_match(request.get("stamps") or {}, wanted)


def stamps_match(stored: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Celery's worker's match of a request's stamps against revoked ones: a stamp of a
    wanted name shares a value with it (either side one value or a list of them)."""
    return any(
        name in stored
        and stored[name] is not None
        and bool(_values(stored[name]) & _values(values))
        for name, values in wanted.items()
    )


def _values(value: Any) -> set[str]:
    return {dumps(v) for v in (value if isinstance(value, list | tuple) else [value])}


def _revoke_rows(tx: Tx, rows: Sequence[Any], terminate: bool, operator: str) -> list[Revoked]:
    revoked = []
    for row in rows:
        moved = request_cancel(tx, row.id, reason=f"revoke:{operator}", running=terminate)
        if moved == S.CANCELLED:
            cancelled_links(tx, row.id)
        if moved is None:  # a write may have won the row since it was read: as it is now
            now = occurrence_row(tx, row.id)
            fence, status = now["fence"], now["status"]
        else:  # a cancel keeps the fence: the row's, read in this transaction
            fence, status = row.fence, moved.value
        task_id = caller_key(row.trigger_key) or row.trigger_key
        revoked.append(Revoked(row.id, task_id, fence, row.queue, status, moved is not None))
    return revoked
