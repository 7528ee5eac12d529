"""The transition table's rows of runtime controls (pause, resume, hand back), one per
(from states, trigger), as :mod:`kernel.transitions.occurrences` describes the table.

A control's state is that of one occurrence's pause/resume: ``none`` (no row yet) ->
pause_requested -> paused -> resumed -> terminal (the occurrence settled).
"""

from __future__ import annotations

from kernel import statements as st
from kernel.events import EventType as E
from kernel.states import ControlState as C
from kernel.transitions.door import LOGGED_ON_POSTGRES, Transition

__all__ = [
    "OPERATOR_REQUESTS_PAUSE", "PAUSE_REQUEST_REBOUND", "WORKER_ACKS_PAUSE",
    "WORKER_RELEASES_CONTROL", "CONTROL_RESUMES", "CONTROL_ENDS", "CONTROL_ENDS_WITH_SETTLE",
    "CONTROL_TRANSITIONS",
]  # fmt: skip

OPERATOR_REQUESTS_PAUSE = Transition(
    ("none", C.TERMINAL, C.RESUMED),
    "operator requests a pause",
    (C.PAUSE_REQUESTED,),
    st.REQUEST_PAUSE,
    "occurrence running (fence when given), lease live; revision when given",
    (E.OCCURRENCE_PAUSE_REQUESTED,),
)
PAUSE_REQUEST_REBOUND = Transition(
    (C.PAUSE_REQUESTED,),
    "worker claims again",
    (C.PAUSE_REQUESTED,),
    st.REBIND_PAUSE_REQUEST,
    "pause_requested",
    (),
)
WORKER_ACKS_PAUSE = Transition(
    (C.PAUSE_REQUESTED,),
    "worker acknowledges at a safe point",
    (C.PAUSED, C.TERMINAL),
    st.ACK_PAUSE,
    "request id, fence, revision when given, safe point; CASE cancel -> terminal",
    (E.OCCURRENCE_PAUSED,),
)
WORKER_RELEASES_CONTROL = Transition(
    ("none", C.PAUSE_REQUESTED, C.RESUMED, C.TERMINAL),
    "worker hands back (warm shutdown)",
    (C.RESUMED, C.PAUSED),
    st.RELEASE_CONTROL,
    "upsert; CASE pause pending for this fence -> paused",
    (E.OCCURRENCE_HANDED_BACK, E.OCCURRENCE_PAUSED),
)
CONTROL_RESUMES = Transition(
    (C.PAUSED,),
    "operator resumes",
    (C.RESUMED,),
    st.RESUME,
    "paused; revision when given",
    (E.OCCURRENCE_RESUMED,),
)
CONTROL_ENDS = Transition(
    (C.PAUSE_REQUESTED, C.PAUSED, C.RESUMED),
    "occurrence settles",
    (C.TERMINAL,),
    st.TERMINATE_CONTROL,
    "not terminal",
    (E.CONTROL_TERMINAL,),
)
CONTROL_ENDS_WITH_SETTLE = Transition(
    (C.PAUSE_REQUESTED, C.PAUSED, C.RESUMED),
    "occurrence settles (PostgreSQL: with the settle's events, in one statement)",
    (C.TERMINAL,),
    st.SETTLED_EVENTS,
    "not terminal; a statement after SETTLE, so that its snapshot sees a pause request "
    "that committed while SETTLE waited for the row",
    (E.CONTROL_TERMINAL,),
    logged_on=LOGGED_ON_POSTGRES,
)

CONTROL_TRANSITIONS: tuple[Transition, ...] = (
    OPERATOR_REQUESTS_PAUSE,
    PAUSE_REQUEST_REBOUND,
    WORKER_ACKS_PAUSE,
    WORKER_RELEASES_CONTROL,
    CONTROL_RESUMES,
    CONTROL_ENDS,
    CONTROL_ENDS_WITH_SETTLE,
)
