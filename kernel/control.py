"""Ending a runtime control when its occurrence settles, shared by every settling path."""

from __future__ import annotations

from kernel import transitions as T
from kernel.events import EventType
from kernel.tx import Tx

__all__ = ["end_control"]


def end_control(tx: Tx, occ_id: int, *, job_id: str, fence: int | None) -> None:
    """Make the occurrence's control ``terminal``; a pause still pending ends with an event."""
    ended = T.run(tx, T.CONTROL_ENDS, {"occ_id": occ_id, "now": tx.now})
    if ended is not None and ended.pause_request_id is not None and ended.paused_at is None:
        tx.emit(
            EventType.CONTROL_TERMINAL,
            job_id=job_id,
            occurrence_id=occ_id,
            fence=fence,
            request_id=ended.pause_request_id,
            revision=ended.revision,
        )
