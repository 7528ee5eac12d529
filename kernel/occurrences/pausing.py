"""An operator's runtime control of a running occurrence: pause request and resume.

The holder's side (acknowledge at a safe point, warm hand back) is
:func:`kernel.occurrences.releases.release`. Both actions write first and read only when their
guarded statement changed nothing, to raise the precise error.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from kernel import statements as st
from kernel.errors import (
    FenceConflict,
    InvalidArgument,
    KernelError,
    LeaseLost,
    PauseUnsupported,
    RevisionConflict,
    StateConflict,
)
from kernel.events import EventType
from kernel.occurrences.rows import control_row, occurrence_row, record_request
from kernel.records import dumps, loads
from kernel.states import ControlState, OccurrenceStatus, SafePoint
from kernel.transaction.tx import Tx
from kernel.transitions import controls as TC
from kernel.transitions import door
from kernel.transitions import occurrences as T

__all__ = ["capability_digest", "request_pause", "resume"]

_SAFE_POINTS = {point.value for point in SafePoint}


def capability_digest(schema_version: int, safe_points: Sequence[str]) -> str:
    """sha256 of the adapter's declared pause capability (schema version, sorted safe points)."""
    capability = {"schema_version": schema_version, "safe_points": sorted(safe_points)}
    return hashlib.sha256(dumps(capability).encode()).hexdigest()


def request_pause(
    tx: Tx,
    occurrence_id: int,
    *,
    expected_fence: int | None,
    expected_revision: int | None,
    request_id: str,
    safe_points: Sequence[str],
    schema_version: int,
    operator: str,
) -> bool:
    """Ask the running holder to pause at its next safe point. Returns ``deduplicated``.

    Needs the occurrence running (under ``expected_fence`` when given) with a live
    lease, no open control (at ``expected_revision`` when given), and an adapter
    that declared safe points (``safe_points``, from the adapter registry).
    """
    unknown = set(safe_points) - _SAFE_POINTS
    if unknown:
        raise InvalidArgument("safe_points", f"unknown safe points {sorted(unknown)}")
    digest = capability_digest(schema_version, safe_points)
    evidence = {"fence": expected_fence, "revision": expected_revision, "capability": digest}
    if record_request(tx, request_id, "pause", str(occurrence_id), evidence, operator):
        return True
    if not safe_points:
        o = occurrence_row(tx, occurrence_id)
        raise PauseUnsupported(
            f"occurrence {occurrence_id} runs a {loads(o['definition'])['kind']!r} adapter, which "
            "declares no safe point; it cannot be paused (cancel it instead)",
            occurrence_id=occurrence_id,
        )
    requested = door.run(
        tx,
        TC.OPERATOR_REQUESTS_PAUSE,
        {
            "occurrence_id": occurrence_id,
            "request_id": request_id,
            "safe_points": dumps(sorted(safe_points)),
            "now": tx.now,
            "expected_fence": expected_fence,
            "expected_revision": expected_revision,
        },
    )
    if requested is None:
        raise _pause_refused(tx, occurrence_id, expected_fence, expected_revision)
    o = occurrence_row(tx, occurrence_id)
    tx.emit(
        EventType.OCCURRENCE_PAUSE_REQUESTED,
        job_id=o["job_id"],
        occurrence_id=occurrence_id,
        fence=requested.expected_fence,
        request_id=request_id,
        operator=operator,
        revision=requested.revision,
        capability_digest=digest,
    )
    return False


def _pause_refused(
    tx: Tx, occurrence_id: int, expected_fence: int | None, expected_revision: int | None
) -> KernelError:
    """Why REQUEST_PAUSE changed nothing, read once after the fact."""
    o = occurrence_row(tx, occurrence_id)
    c = control_row(tx, occurrence_id)
    open_control = c is not None and c["state"] not in (ControlState.TERMINAL, ControlState.RESUMED)
    if open_control:
        return StateConflict(
            f"occurrence {occurrence_id} already has a {c['state']} control",
            occurrence_id=occurrence_id,
            state=c["state"],
            revision=c["revision"],
        )
    if o["status"] != OccurrenceStatus.RUNNING:
        return StateConflict(
            f"occurrence {occurrence_id} is {o['status']}, not running; only a running "
            "occurrence can be paused",
            occurrence_id=occurrence_id,
            status=o["status"],
        )
    if expected_fence is not None and o["fence"] != expected_fence:
        return FenceConflict(
            f"occurrence {occurrence_id} is at fence {o['fence']}, not {expected_fence}: "
            "it was claimed again since you looked",
            occurrence_id=occurrence_id,
            expected_fence=expected_fence,
            actual_fence=o["fence"],
        )
    if o["lease_expires_at"] <= tx.now:
        return LeaseLost(
            f"occurrence {occurrence_id}: its lease has expired; the holder is gone",
            occurrence_id=occurrence_id,
        )
    if c is not None and expected_revision is not None and c["revision"] != expected_revision:
        return stale_revision(occurrence_id, expected_revision, c["revision"])
    # Every guard holds now but did not when the statement ran: the occurrence
    # changed meanwhile (PostgreSQL READ COMMITTED); this request came first.
    return StateConflict(
        f"occurrence {occurrence_id} changed while the pause was requested; look again and retry",
        occurrence_id=occurrence_id,
        status=o["status"],
    )


def stale_revision(
    occurrence_id: int, expected: int | None, actual: int | None
) -> RevisionConflict:
    return RevisionConflict(
        f"occurrence {occurrence_id}: control revision is {actual}, not {expected}",
        occurrence_id=occurrence_id,
        expected_revision=expected,
        actual_revision=actual,
    )


def resume(
    tx: Tx, occurrence_id: int, *, request_id: str, expected_revision: int | None, operator: str
) -> bool:
    """Make a paused occurrence claimable; the next claim resumes from its checkpoint."""
    if record_request(
        tx, request_id, "resume", str(occurrence_id), {"revision": expected_revision}, operator
    ):
        return True
    tx.lock(st.LOCK_OCCURRENCE, {"occurrence_id": occurrence_id})
    resumed = door.run(
        tx,
        TC.CONTROL_RESUMES,
        {
            "of_occurrence": occurrence_id,
            "request_id": request_id,
            "expected_revision": expected_revision,
            "now": tx.now,
        },
    )
    if resumed is None:
        occurrence_row(tx, occurrence_id)
        c = control_row(tx, occurrence_id)
        if c is None or c["state"] != ControlState.PAUSED:
            raise StateConflict(
                f"occurrence {occurrence_id} is not paused",
                occurrence_id=occurrence_id,
                state=c["state"] if c else None,
            )
        raise stale_revision(occurrence_id, expected_revision, c["revision"])
    available = door.run(tx, T.OPERATOR_RESUMES, {"occurrence_id": occurrence_id, "now": tx.now})
    o = available._mapping if available is not None else occurrence_row(tx, occurrence_id)
    tx.emit(
        EventType.OCCURRENCE_RESUMED,
        job_id=o["job_id"],
        occurrence_id=occurrence_id,
        fence=o["fence"],
        request_id=request_id,
        operator=operator,
    )
    return False
