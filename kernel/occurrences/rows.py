"""The floor every actor stands on: an occurrence's and its control's row, the
operator requests and requeue grants recorded by request id, and the enqueued rows two
actors insert (an enqueue, and the settle that fires a run's links).

Each operator action is idempotent by request id (SPEC I7): the first call records the
request and the evidence the caller gave; a replay answers ``deduplicated``. Evidence a
caller did not give (``None``) is not evidence: a replay without it is a faithful
replay. Explicitly given evidence that differs from the first call's is refused.
"""

from __future__ import annotations

import functools
import json
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import sqlalchemy as sa

from kernel import statements as st
from kernel.db.driver import pipeline
from kernel.db.schema import occurrences
from kernel.errors import EvidenceConflict, InvalidArgument, NotFound
from kernel.events import EventType
from kernel.records import dumps, loads
from kernel.spec.enqueue_request import EnqueueRow
from kernel.transaction.tx import Tx
from kernel.transitions import chords as TC
from kernel.transitions import occurrences as T

__all__ = [
    "Made",
    "control_row",
    "existing_keys",
    "grant",
    "insert_chunks",
    "insert_enqueued",
    "insert_links",
    "occurrence_row",
    "record_request",
]


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


class Made(NamedTuple):
    """An enqueued row as its statement inserted it."""

    occurrence_id: int
    revision: int
    available_at: int
    expires_at: int | None


def insert_enqueued(
    tx: Tx, rows: Sequence[EnqueueRow], *, alone: bool = False
) -> tuple[dict[str, Made], dict[str, int]]:
    """Insert enqueued ``rows`` where their job exists and their key is new (TASK_ENQUEUED),
    with their events. ``alone``: one row, sent as its own transaction where that is one
    round trip (``Tx.all_alone``; the row is the whole change, or nothing is).

    Returns:
        idempotency key -> the row inserted; and key -> occurrence id of the rows not
        inserted whose caller's key the statement saw existing (PostgreSQL only): a key
        not in either was inserted by another transaction meanwhile, or was generated
        (``enqueue:...``) and existed, or its job does not exist.
    """
    chunks = (rows[start : start + size] for start, size in st.enqueue_chunks(len(rows)))
    return insert_chunks(tx, chunks, alone=alone)


#: The columns of an enqueue statement's answer read, in this order.
_ANSWER = ("idempotency_key", "id", "job_revision", "available_at", "expires_at", "existing_id")


def insert_chunks(
    tx: Tx, chunks: Iterable[Sequence[EnqueueRow]], *, alone: bool = False
) -> tuple[dict[str, Made], dict[str, int]]:
    """:func:`insert_enqueued` of rows made while they are sent: one statement a chunk (at
    most ``MAX_ROWS`` rows), pipelined (``kernel.db.driver.pipeline``: on PostgreSQL the
    server inserts a chunk while ``chunks`` makes the next), every answer read at the end.
    A chunk that reads the transaction's instant (``now`` None) is answered before the next
    is sent, which is given that instant: every chunk is written at the same one."""
    tx.allowed_events.update(T.TASK_ENQUEUED.events)  # its statement, per batch size
    answers: list[Callable[[], list[Any]]] = []
    with pipeline(tx.conn, enabled=not alone) as sent:
        for chunk in chunks:
            statement = st.enqueue_occurrences(tx.dialect, len(chunk))
            params = st.enqueue_params(tx.dialect, [r.values for r in chunk])
            if answers and tx.now_param() is None and (first := answers[0]()):
                tx.observe_now(first[0].now)  # every row of a chunk answers its instant
            params["now"] = tx.now_param()
            if alone:
                answers.append(functools.partial(tx.all_alone, statement, params))
            else:
                answers.append(sent.send(statement, params))
        made: dict[str, Made] = {}
        found: dict[str, int] = {}
        for answer in answers:
            rows = answer()
            if not rows:
                continue
            tx.observe_now(rows[0].now)  # the instant of the chunks after it
            # By position: a Row's attribute costs more than the rest of the loop (1.2 against
            # 0.17 ms for 500 rows).
            pick = operator.itemgetter(*map(rows[0]._fields.index, _ANSWER))
            for key, occurrence_id, revision, available_at, expires_at, existing in map(pick, rows):
                if occurrence_id is not None:
                    made[key] = Made(occurrence_id, revision, available_at, expires_at)
                elif existing is not None:
                    found[key] = existing
    if made and tx.dialect not in T.TASK_ENQUEUED.logged_on:  # else the statement wrote them
        ids = sorted(m.occurrence_id for m in made.values())  # made in the rows' order
        st.LOG_ENQUEUED.execute(tx.conn, {"ids": json.dumps(ids)})
    return made, found


def existing_keys(tx: Tx, rows: Sequence[EnqueueRow]) -> dict[str, int]:
    """idempotency key -> occurrence id of those of ``rows`` that exist, found by their
    unique (job, trigger key), which their key is made of (revision 0028)."""
    if not rows:
        return {}
    keys = {(row.job_id, row.values["trigger_key"]): row.key for row in rows}
    triggers: dict[str, list[str]] = {}
    for job_id, trigger_key in keys:
        triggers.setdefault(job_id, []).append(trigger_key)
    # A job's trigger keys in one list: SQLite seeks each; a row value IN walks the index.
    OCC = occurrences
    found = tx.conn.execute(
        sa.select(OCC.c.job_id, OCC.c.trigger_key, OCC.c.id).where(
            sa.or_(*(
                (OCC.c.job_id == job_id) & OCC.c.trigger_key.in_(listed)
                for job_id, listed in triggers.items()
            ))
        )
    )  # fmt: skip
    return {keys[(job_id, trigger_key)]: id_ for job_id, trigger_key, id_ in found}


def insert_links(
    tx: Tx, parent_id: int | None, rows: Sequence[EnqueueRow], *, errbacks: bool = False
) -> tuple[dict[str, Made], dict[str, int]]:
    """Insert a settled run's link ``rows`` whose keys are new, and tell of those whose
    job was deleted since; answers the rows made, and the ids of the keys that existed.

    Callbacks made are the transaction's ``made_runs`` (their maker hints them once it
    commits); ``errbacks`` are not: a failure reaches the result backend after its settle
    (a chord's ``ChordError``, an owed end), and Celery calls an errback once the failure
    is stored, so Beat's pump hints them."""
    made, existing = insert_enqueued(tx, rows)
    if not errbacks:
        tx.made_runs.extend(m.occurrence_id for m in made.values())
    TC.hand_over(tx, rows, made)  # a replaced chord member's replacement, made now
    unseen = [row for row in rows if row.key not in made and row.key not in existing]
    existing.update(existing_keys(tx, unseen))
    for row in rows:
        if row.key not in made and row.key not in existing:
            tx.emit(
                EventType.LINK_NOT_MADE,
                job_id=row.job_id,
                occurrence_id=parent_id,
                reason="job_deleted",
                trigger_key=row.values["trigger_key"],
            )
    return made, existing
