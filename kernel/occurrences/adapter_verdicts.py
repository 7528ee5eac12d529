"""Adapter adjudication: a worker asks the occurrence's adapter before an operator is asked.

An at-most-once run whose lease expired after execution may have begun waits in
``needs_adjudication`` (I6). Beat's pump hints such an occurrence to a worker of its
queue (:func:`adapter_asks_due`); the worker takes the ask (:func:`ask_adapter`: one
live ask per uncertain run, a token with a deadline, like a lease), asks its adapter,
and brings back a verdict (:func:`adapter_adjudicates`) or "cannot tell"
(:func:`adapter_cannot_tell`). An ask whose asker crashed expires and is hinted again,
at most :data:`MAX_ASKS` times; after that, or after "cannot tell", only an operator
decides. An operator's verdict always wins: the adapter's answer then changes nothing
and is refused with ``STATE_CONFLICT``.
"""

from __future__ import annotations

import uuid
from typing import Any, NoReturn

import sqlalchemy as sa

from kernel import statements as st
from kernel.db.schema import adjudication_asks, events, occurrences
from kernel.errors import InvalidArgument, LeaseLost, NotFound, StateConflict
from kernel.events import EventType
from kernel.occurrences.dispatch import mark_hinted
from kernel.occurrences.verdicts import ADAPTER, OPERATOR, apply_verdict
from kernel.reads import get_occurrence
from kernel.records import loads, to_dt
from kernel.reports import AdapterAsk, Adjudication, Verdict
from kernel.spec.durations import canonical_json
from kernel.states import Decision, OccurrenceStatus
from kernel.transaction.tx import Tx
from kernel.transitions import door
from kernel.transitions import occurrences as T
from kernel.types import DispatchHint, Occurrence

__all__ = [
    "MAX_ASKS",
    "MAX_EVIDENCE_BYTES",
    "ask_adapter",
    "adapter_adjudicates",
    "adapter_cannot_tell",
    "adapter_asks_due",
    "last_adjudication",
]

S = OccurrenceStatus
OCC = occurrences
ASK = adjudication_asks
#: Asks of one uncertain run before it is left to the operator (each expired unanswered).
MAX_ASKS = 3
#: Evidence an adapter may record with its verdict, as canonical JSON.
MAX_EVIDENCE_BYTES = 4096


def ask_adapter(tx: Tx, occurrence_id: int, *, asker: str, window_ms: int) -> AdapterAsk | None:
    """Take the one live ask of ``occurrence_id``'s uncertain run; None when it is not to be asked
    (decided, asked by another worker now, left to the operator, or gone)."""
    token = uuid.uuid4().hex
    deadline = tx.now + window_ms
    asked = door.run(
        tx,
        T.WORKER_ASKS_ADAPTER,
        {
            "occurrence_id": occurrence_id,
            "ask_token": token,
            "asker": asker,
            "now": tx.now,
            "deadline": deadline,
            "max_asks": MAX_ASKS,
        },
    )
    if asked is None:
        return None
    occurrence = get_occurrence(tx, occurrence_id)
    tx.emit(
        EventType.OCCURRENCE_ADAPTER_ASKED,
        job_id=occurrence.job_id,
        occurrence_id=occurrence_id,
        fence=asked.fence,
        asker=asker,
        ask=asked.asks,
        token=token,
    )
    return AdapterAsk(occurrence, token, to_dt(deadline))  # type: ignore[arg-type]


def adapter_adjudicates(tx: Tx, occurrence_id: int, *, token: str, verdict: Verdict) -> Occurrence:
    """Apply the adapter's verdict of the ask ``token``.

    Raises:
        InvalidArgument: the decision is not applied/not_applied, or the evidence is not
            a JSON object of at most :data:`MAX_EVIDENCE_BYTES`.
        StateConflict: the occurrence no longer needs adjudication (an operator decided).
        LeaseLost: the ask expired or another worker asks now.
    """
    decision = Decision(verdict.decision)
    if decision not in (Decision.APPLIED, Decision.NOT_APPLIED):
        raise InvalidArgument("decision", "an adapter decides applied or not_applied only")
    evidence = _checked_evidence(verdict.evidence)
    to_status = S.SUCCEEDED if decision == Decision.APPLIED else S.RETRY_WAIT
    settled = to_status == S.SUCCEEDED
    decided = door.run(
        tx,
        T.ADAPTER_ADJUDICATES,
        {
            "occurrence_id": occurrence_id,
            "ask_token": token,
            "to_status": to_status.value,
            "settled": tx.now if settled else None,
            "now": tx.now,
        },
    )
    if decided is None:
        _refuse(tx, occurrence_id, token)
    asker = tx.conn.execute(st.ASK_BY_ID, {"occurrence_id": occurrence_id}).one().asker
    tx.emit(
        EventType.OCCURRENCE_ADJUDICATED,
        job_id=decided.job_id,
        occurrence_id=occurrence_id,
        fence=decided.fence,
        decision=decision.value,
        status=to_status.value,
        authority=ADAPTER,
        asker=asker,
        evidence=evidence,
    )
    apply_verdict(tx, occurrence_id, decided, to_status, grant_id=f"adapter:{token}")
    return get_occurrence(tx, occurrence_id)


def adapter_cannot_tell(tx: Tx, occurrence_id: int, *, token: str, reason: str) -> None:
    """Record that the adapter of the ask ``token`` could not tell; the operator decides.

    Raises:
        StateConflict: the occurrence no longer needs adjudication (an operator decided).
        LeaseLost: the ask expired or another worker asks now.
    """
    marked = door.run(
        tx,
        T.ADAPTER_CANNOT_TELL,
        {"of_occurrence": occurrence_id, "ask_token": token, "now": tx.now},
    )
    if marked is None:
        _refuse(tx, occurrence_id, token)
    occurrence = get_occurrence(tx, occurrence_id)
    tx.emit(
        EventType.OCCURRENCE_ADAPTER_CANNOT_TELL,
        job_id=occurrence.job_id,
        occurrence_id=occurrence_id,
        fence=marked.fence,
        reason=reason[:500],
    )


def _checked_evidence(evidence: Any) -> dict[str, Any]:
    if not isinstance(evidence, dict):
        raise InvalidArgument("evidence", "must be a JSON object")
    size = len(canonical_json(evidence, "evidence").encode())
    if size > MAX_EVIDENCE_BYTES:
        raise InvalidArgument("evidence", f"is {size} bytes; the limit is {MAX_EVIDENCE_BYTES}")
    return evidence


def _refuse(tx: Tx, occurrence_id: int, token: str) -> NoReturn:
    """Zero rows: read once and raise why the answer of ask ``token`` changes nothing."""
    o = get_occurrence(tx, occurrence_id)
    if o.status != S.NEEDS_ADJUDICATION:
        raise StateConflict(
            f"occurrence {occurrence_id} is {o.status.value}: it was decided before the adapter's "
            "answer arrived, so the answer is discarded",
            occurrence_id=occurrence_id,
            status=o.status.value,
        )
    held = tx.conn.execute(st.ASK_BY_ID, {"occurrence_id": occurrence_id}).first()
    if held is None:
        raise NotFound(
            f"occurrence {occurrence_id} was never asked about", occurrence_id=occurrence_id
        )
    raise LeaseLost(
        f"occurrence {occurrence_id}: ask {token} is no longer live (it expired, or another worker "
        "asks now); the answer is discarded",
        occurrence_id=occurrence_id,
        token=token,
    )


def adapter_asks_due(tx: Tx, *, limit: int, rehint_after_ms: int) -> list[DispatchHint]:
    """Occurrences needing adjudication whose adapter is to be asked now, not hinted
    recently (or not since their run's expiry); marks them hinted now."""
    answered = sa.exists().where(
        ASK.c.occurrence_id == OCC.c.id,
        ASK.c.fence == OCC.c.fence,
        sa.or_(ASK.c.state != "asking", ASK.c.ask_deadline > tx.now, ASK.c.asks >= MAX_ASKS),
    )
    query = (
        sa.select(OCC.c.id, OCC.c.job_id, OCC.c.queue, OCC.c.kind)
        .where(
            OCC.c.status == S.NEEDS_ADJUDICATION,
            sa.or_(
                OCC.c.dispatched_at.is_(None),
                OCC.c.dispatched_at <= tx.now - rehint_after_ms,
                # The hint that led to the uncertain run came before its expiry.
                OCC.c.dispatched_at < OCC.c.updated_at,
            ),
            ~answered,
        )
        .order_by(OCC.c.updated_at, OCC.c.id)
        .limit(limit)
        # A second pump skips these (PostgreSQL; SQLite renders no FOR UPDATE).
        .with_for_update(skip_locked=True, of=OCC)
    )
    hints = [DispatchHint(r.id, r.job_id, r.queue, r.kind) for r in tx.conn.execute(query)]
    mark_hinted(tx, hints)
    return hints


def last_adjudication(tx: Tx, occurrence_id: int) -> Adjudication | None:
    """The last verdict on an uncertain run of ``occurrence_id`` (operator's or adapter's),
    or None."""
    row = tx.conn.execute(
        sa.select(events)
        .where(
            events.c.occurrence_id == occurrence_id,
            events.c.type == EventType.OCCURRENCE_ADJUDICATED,
        )
        .order_by(events.c.id.desc())
        .limit(1)
    ).first()
    if row is None:
        return None
    data = loads(row.data) or {}
    authority = data.get("authority", OPERATOR)
    evidence = (
        data.get("evidence") or {}
        if authority == ADAPTER
        else {"operator": data.get("operator"), "request_id": data.get("request_id")}
    )
    return Adjudication(
        decision=Decision(data["decision"]),
        authority=authority,
        evidence=evidence,
        fence=row.fence,
        decided_at=to_dt(row.at),  # type: ignore[arg-type]
    )
