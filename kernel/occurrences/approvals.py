"""Approval gates: a firing of a job with ``approval.required`` waits for an operator.

Its occurrence is made ``awaiting_approval`` (not claimable, not hinted, counted in
the job's backlog). ``approve`` queues it; ``reject`` records it as ``skipped``
with reason ``approval_rejected`` — a planned firing that was not run, which is what
``skipped`` means. When ``approval.timeout`` passes, Beat applies ``approval.auto``
(``reject`` by default: skip reason ``approval_timeout``). At most
``approval.max_pending`` occurrences of a job await approval; a firing beyond that
is skipped with reason ``approval_backlog``. An operator's ``run-now`` is itself a
person's decision to run, so it is not held.
"""

from __future__ import annotations

from typing import Any

from kernel import statements as st
from kernel.errors import StateConflict
from kernel.events import EventType
from kernel.limits import budgets
from kernel.occurrences.rows import occurrence_row, record_request
from kernel.states import OccurrenceStatus
from kernel.transaction.tx import Tx
from kernel.transitions import door, notices
from kernel.transitions import occurrences as T

__all__ = [
    "hold",
    "decide",
    "apply_timeouts",
]

S = OccurrenceStatus
_REASON_MAX = 500


def hold(tx: Tx, job_id: str, approval: dict[str, Any]) -> tuple[S, str | None]:
    """Whether a new firing awaits approval, or is skipped because too many already do."""
    tx.lock(st.LOCK_JOB, {"job_id": job_id})
    waiting = tx.conn.execute(st.AWAITING_IN_JOB, {"job_id": job_id}).scalar_one()
    if waiting >= approval["max_pending"]:
        return S.SKIPPED, "approval_backlog"
    return S.AWAITING_APPROVAL, None


def _not_awaiting(tx: Tx, occurrence_id: int, action: str) -> StateConflict:
    o = occurrence_row(tx, occurrence_id)  # zero rows: read once for the precise error
    return StateConflict(
        f"occurrence {occurrence_id} is {o['status']}, not awaiting_approval; only an occurrence "
        f"awaiting approval can be {action}",
        occurrence_id=occurrence_id,
        status=o["status"],
    )


def decide(
    tx: Tx,
    occurrence_id: int,
    *,
    approved: bool,
    request_id: str,
    operator: str,
    reason: str | None,
) -> bool:
    """An operator approves (queued) or rejects (skipped, reason ``approval_rejected``;
    its budget reservation released) an occurrence awaiting approval.

    Returns:
        True for a faithful replay of the request id.
    """
    action = "approve" if approved else "reject"
    if record_request(tx, request_id, action, str(occurrence_id), {}, operator):
        return True
    params = {"occurrence_id": occurrence_id, "now": tx.now}
    moved = (
        door.run(tx, T.OPERATOR_APPROVES, params)
        if approved
        else door.run(tx, T.OPERATOR_REJECTS, {**params, "reason": "approval_rejected"})
    )
    if moved is None:
        raise _not_awaiting(tx, occurrence_id, "approved" if approved else "rejected")
    tx.emit(
        EventType.OCCURRENCE_APPROVED if approved else EventType.OCCURRENCE_REJECTED,
        job_id=moved.job_id,
        occurrence_id=occurrence_id,
        fence=moved.fence,
        request_id=request_id,
        operator=operator,
        auto=False,
        **({"reason": reason[:_REASON_MAX]} if reason else {}),
    )
    if not approved:
        budgets.release(tx, occurrence_id, job_id=moved.job_id)
        notices.owe_result(tx, occurrence_id, moved.fence, S.SKIPPED)
    return False


def apply_timeouts(tx: Tx, limit: int) -> dict[str, int]:
    """Apply the auto action of up to ``limit`` occurrences whose approval timed out."""
    decided = door.run_all(tx, T.APPROVAL_TIMES_OUT, {"now": tx.now, "limit": limit})
    counts = {"approved": 0, "rejected": 0}
    for row in decided:
        approved = row.status == S.QUEUED
        tx.emit(
            EventType.OCCURRENCE_APPROVED if approved else EventType.OCCURRENCE_REJECTED,
            job_id=row.job_id,
            occurrence_id=row.id,
            fence=row.fence,
            auto=True,
            reason="approval_timeout",
        )
        if approved:
            counts["approved"] += 1
        else:
            counts["rejected"] += 1
            budgets.release(tx, row.id, job_id=row.job_id)
            notices.owe_result(tx, row.id, row.fence, S.SKIPPED)
    return counts
