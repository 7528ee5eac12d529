"""The floor every actor stands on: an occurrence's and its control's row, and the
operator requests and requeue grants recorded by request id.

Each operator action is idempotent by request id (SPEC I7): the first call records the
request and the evidence the caller gave; a replay answers ``deduplicated``. Evidence a
caller did not give (``None``) is not evidence: a replay without it is a faithful
replay. Explicitly given evidence that differs from the first call's is refused.
"""

from __future__ import annotations

from typing import Any

from kernel import statements as st
from kernel.errors import EvidenceConflict, InvalidArgument, NotFound
from kernel.records import dumps, loads
from kernel.transaction.tx import Tx

__all__ = ["record_request", "grant", "occurrence_row", "control_row"]


def record_request(
    tx: Tx, request_id: str, action: str, target: str, evidence: dict[str, Any], operator: str
) -> bool:
    """Record an operator request; True when it is a faithful replay of an earlier one.

    Raises:
        EvidenceConflict: the request id was used for another action or target, or
            evidence given now (not None) differs from the first call's.
    """
    if not request_id or len(request_id) > 128:
        raise InvalidArgument("request_id", "must be 1 to 128 characters")
    params = {
        "request_id": request_id,
        "action": action,
        "target": target,
        "evidence": dumps(evidence),
        "operator": operator,
        "now": tx.now,
    }
    if tx.conn.execute(st.RECORD_REQUEST[tx.dialect], params).first() is not None:
        return False
    first = tx.conn.execute(st.REQUEST_BY_ID, {"request_id": request_id}).one()
    recorded = loads(first.evidence) or {}
    changed = {k: v for k, v in evidence.items() if v is not None and recorded.get(k) != v}
    if (first.action, first.target) != (action, target) or changed:
        raise EvidenceConflict(
            f"request id {request_id!r} was first used for {first.action} {first.target} "
            f"with {first.evidence}; use a new request id for a different action",
            request_id=request_id,
            **({"changed": sorted(changed)} if changed else {}),
        )
    return True


def grant(tx: Tx, occurrence_id: int, request_id: str, fence: int, error_code: str | None) -> None:
    tx.conn.execute(
        st.GRANT[tx.dialect],
        {
            "request_id": request_id,
            "occurrence_id": occurrence_id,
            "fence": fence,
            "error_code": error_code or "",
            "now": tx.now,
        },
    )


def occurrence_row(tx: Tx, occurrence_id: int) -> Any:
    row = tx.conn.execute(st.OCCURRENCE_BY_ID, {"occurrence_id": occurrence_id}).first()
    if row is None:
        raise NotFound(f"occurrence {occurrence_id} does not exist", occurrence_id=occurrence_id)
    return row._mapping


def control_row(tx: Tx, occurrence_id: int) -> Any:
    row = tx.conn.execute(st.CONTROL_BY_ID, {"occurrence_id": occurrence_id}).first()
    return row._mapping if row is not None else None
