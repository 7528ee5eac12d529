"""Verdicts on uncertain runs (I6): an operator's, and what any verdict does beyond its status.

An at-most-once occurrence whose lease expired after execution may have begun waits in
``needs_adjudication``. :func:`adjudicate` is the operator's verdict;
``kernel.occurrences.adapter_verdicts`` brings the adapter's. Both end in :func:`apply_verdict`, so
an applied or abandoned run is settled like any other: its control ends and its chained
children fire.
"""

from __future__ import annotations

from typing import Any

from kernel.errors import InvalidArgument, StateConflict
from kernel.events import EventType
from kernel.occurrences.chains import fire_children, fire_links
from kernel.occurrences.control import end_control
from kernel.occurrences.rows import grant, occurrence_row, record_request
from kernel.records import dumps
from kernel.states import Decision, OccurrenceStatus
from kernel.transaction.tx import Tx
from kernel.transitions import door, notices
from kernel.transitions import occurrences as T

__all__ = ["OPERATOR", "ADAPTER", "adjudicate", "apply_verdict"]

S = OccurrenceStatus
#: Who decided (``authority`` in ``occurrence_adjudicated``).
OPERATOR = "operator"
ADAPTER = "adapter"


def adjudicate(
    tx: Tx, occurrence_id: int, *, decision: str, request_id: str, operator: str
) -> bool:
    """Decide an at-most-once occurrence whose outcome is unknown (I6)."""
    try:
        verdict = Decision(decision)
    except ValueError:
        raise InvalidArgument("decision", "must be applied, not_applied or abandon") from None
    if record_request(
        tx, request_id, "adjudicate", str(occurrence_id), {"decision": verdict.value}, operator
    ):
        return True
    to_status, error = {
        Decision.APPLIED: (S.SUCCEEDED, None),
        # The uncertain run used an attempt; the operator's word earns it back (a grant).
        Decision.NOT_APPLIED: (S.RETRY_WAIT, None),
        Decision.ABANDON: (
            S.DEAD_LETTER,
            {"code": "ABANDONED", "message": f"abandoned by {operator}"},
        ),
    }[verdict]
    settled = to_status != S.RETRY_WAIT
    decided = door.run(
        tx,
        T.OPERATOR_ADJUDICATES,
        {
            "occurrence_id": occurrence_id,
            "to_status": to_status.value,
            "settled": tx.now if settled else None,
            "error_json": dumps(error) if error is not None else None,
            "now": tx.now,
        },
    )
    if decided is None:
        o = occurrence_row(tx, occurrence_id)
        raise StateConflict(
            f"occurrence {occurrence_id} is {o['status']}, not needs_adjudication",
            occurrence_id=occurrence_id,
            status=o["status"],
        )
    tx.emit(
        EventType.OCCURRENCE_ADJUDICATED,
        job_id=decided.job_id,
        occurrence_id=occurrence_id,
        fence=decided.fence,
        decision=verdict.value,
        request_id=request_id,
        operator=operator,
        status=to_status.value,
        authority=OPERATOR,
    )
    apply_verdict(tx, occurrence_id, decided, to_status, grant_id=request_id, error=error)
    return False


def apply_verdict(
    tx: Tx,
    occurrence_id: int,
    decided: Any,
    to_status: OccurrenceStatus,
    *,
    grant_id: str,
    error: dict[str, Any] | None = None,
) -> None:
    """What a verdict on an uncertain run does beyond its status (``decided``: the
    verdict statement's VERDICT_RETURNS row). not_applied: the run used an attempt and
    the verdict earns it back (a grant). applied or abandon: the occurrence is settled,
    so its control ends and its chained children fire as after a holder's settle."""
    if to_status == S.RETRY_WAIT:
        grant(tx, occurrence_id, grant_id, decided.fence, "LEASE_EXPIRED")
        return
    end_control(tx, occurrence_id, job_id=decided.job_id, fence=decided.fence)
    notices.ended_unanswered(tx, occurrence_id, decided.fence, to_status)
    if decided.has_children:
        fire_children(
            tx,
            parent_id=occurrence_id,
            parent_job=decided.job_id,
            succeeded=to_status == S.SUCCEEDED,
            result=None,
            error=error,
            parent_depth=decided.chain_depth,
        )
    # An applied run's result was never reported: its callbacks receive None.
    fire_links(
        tx,
        parent_id=occurrence_id,
        links=decided.links,
        trigger_key=decided.trigger_key,
        succeeded=to_status == S.SUCCEEDED,
    )
