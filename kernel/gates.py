"""The gates a firing passes before it may run: the job's approval hold and its budget.

Every way an occurrence is made (the schedule, a chain, run-now) goes through
:func:`create_gated` after its admission; an operator's run-now passes the budget but
not the hold.
"""

from __future__ import annotations

from typing import Any

from kernel import approvals, budgets
from kernel.firing import Created, create_occurrence
from kernel.states import OccurrenceStatus
from kernel.tx import Tx

__all__ = ["create_gated"]

S = OccurrenceStatus


def create_gated(
    tx: Tx,
    *,
    job_id: str,
    spec: dict[str, Any],
    hold_for_approval: bool = True,
    refused: str | None = None,
    **occurrence: Any,
) -> Created:
    """:func:`~kernel.firing.create_occurrence` of a firing the job's gates allow.

    ``refused`` is the admission's skip reason (:func:`kernel.admission.admit`): such a
    firing is recorded skipped and passes no gate (it reserves nothing).
    Held for approval when the job requires it (skipped, reason ``approval_backlog``,
    when ``max_pending`` already wait); skipped with reason ``budget`` when its budget's
    window is spent; else queued. The budget reservation belongs to the occurrence made,
    and is given back when the firing existed already.
    """
    status, reason = (S.SKIPPED, refused) if refused else (S.QUEUED, None)
    if status != S.SKIPPED and hold_for_approval and spec.get("approval"):
        status, reason = approvals.hold(tx, job_id, spec["approval"])
    reservation = None
    if status != S.SKIPPED and spec.get("budget") is not None:
        reservation = budgets.reserve(tx, job_id, spec["budget"])
        if reservation is None:
            status, reason = S.SKIPPED, "budget"
    extra = {
        **(occurrence.pop("extra", None) or {}),
        **({"budget": reservation.budget} if reservation is not None else {}),
    }
    made = create_occurrence(
        tx, job_id=job_id, spec=spec, status=status, skip_reason=reason, extra=extra, **occurrence
    )
    if reservation is not None:
        if made.created and made.id is not None:
            budgets.attach(tx, made.id, reservation)
        else:
            budgets.unreserve(tx, reservation)
    return made
