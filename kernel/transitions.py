"""The transition table: open this first. Every occurrence and runtime-control transition.

One row per (from states, trigger): the state it leads to, the statement in
:mod:`kernel.statements` that performs it, the guard in that statement's WHERE
(what must still hold when it writes), and the events it appends. Where the
outcome depends on the row (a cancel pending, attempts left), the statement
decides it (``CASE``), and the row lists every state it can reach.
tests/kernel/test_state_machine.py checks the kernel against these rows, and
tests/kernel/test_transitions.py that each named statement exists.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel.events import EventType as E
from kernel.states import ControlState as C
from kernel.states import OccurrenceStatus as S

__all__ = ["Transition", "OCCURRENCE_TRANSITIONS", "CONTROL_TRANSITIONS", "allowed_pairs"]


@dataclass(frozen=True, slots=True)
class Transition:
    from_states: tuple[str, ...]
    trigger: str
    to_states: tuple[str, ...]
    statement: str
    guard: str
    events: tuple[E, ...]


_HELD = "running, owner and fence as held, lease live"

OCCURRENCE_TRANSITIONS: tuple[Transition, ...] = (
    Transition(
        ("none",),
        "Beat fires, run-now, a chained child (create)",
        (S.QUEUED, S.SKIPPED, S.AWAITING_APPROVAL),
        "create_occurrence",
        "unique (job, trigger key) and idempotency key; admitted (kernel.admission: overlap "
        "policy, max_queued; job row held) unless run-now --force; then the gates "
        "(kernel/gates.py): approval hold (awaiting_approval, or skipped approval_backlog "
        "past max_pending; not for run-now) and budget (RESERVE_BUDGET; skipped budget "
        "when spent)",
        (E.OCCURRENCE_CREATED, E.OCCURRENCE_SKIPPED),
    ),
    Transition(
        (S.QUEUED, S.RETRY_WAIT),
        "worker claims",
        (S.RUNNING,),
        "CLAIM",
        "fence as seen, available, no cancel; exclusive: unique running index",
        (E.OCCURRENCE_CLAIMED,),
    ),
    Transition(
        (S.RUNNING,),
        "worker reclaims an expired lease",
        (S.RUNNING,),
        "CLAIM",
        "fence as seen, lease expired, at-least-once, no cancel; no attempt spent "
        "(nor needed) when a pause is requested or the run was resumed",
        (E.OCCURRENCE_CLAIMED,),
    ),
    Transition((S.RUNNING,), "worker renews", (S.RUNNING,), "RENEW", _HELD, ()),
    Transition(
        (S.RUNNING,),
        "worker succeeds",
        (S.SUCCEEDED,),
        "SETTLE",
        _HELD,
        (E.OCCURRENCE_SUCCEEDED, E.CONTROL_TERMINAL),
    ),
    Transition(
        (S.RUNNING,),
        "worker fails",
        (S.RETRY_WAIT, S.DEAD_LETTER, S.CANCELLED),
        "SETTLE",
        _HELD + "; CASE cancel_requested -> cancelled instead of retry_wait",
        (
            E.OCCURRENCE_RETRY_WAIT,
            E.OCCURRENCE_DEAD_LETTER,
            E.OCCURRENCE_CANCELLED,
            E.CONTROL_TERMINAL,
        ),
    ),
    Transition(
        (S.RUNNING,),
        "worker stops on cancel",
        (S.CANCELLED,),
        "SETTLE",
        _HELD,
        (E.OCCURRENCE_CANCELLED, E.CONTROL_TERMINAL),
    ),
    Transition(
        (S.RUNNING,),
        "worker releases (pause ack / warm hand back)",
        (S.RETRY_WAIT, S.CANCELLED),
        "RELEASE",
        _HELD + "; CASE cancel_requested -> cancelled",
        (E.OCCURRENCE_PAUSED, E.OCCURRENCE_HANDED_BACK, E.OCCURRENCE_CANCELLED),
    ),
    Transition(
        (S.RUNNING,),
        "Beat expires a lease, or a claim meets one that its expiry settles",
        (S.CANCELLED, S.NEEDS_ADJUDICATION, S.DEAD_LETTER),
        "EXPIRE",
        "running, fence as read, lease expired; CASE cancel / at-most-once / exhausted "
        "(not while a pause is requested or the run was resumed)",
        (E.OCCURRENCE_CANCELLED, E.OCCURRENCE_NEEDS_ADJUDICATION, E.OCCURRENCE_DEAD_LETTER),
    ),
    Transition(
        (S.QUEUED, S.RETRY_WAIT, S.AWAITING_APPROVAL),
        "operator cancels (occurrence or job cancel, or overlap replace)",
        (S.CANCELLED,),
        "CANCEL",
        "status waiting; a budget reservation of a run never begun is released",
        (E.OCCURRENCE_CANCELLED, E.CONTROL_TERMINAL, E.BUDGET_RELEASED),
    ),
    Transition(
        (S.RUNNING,),
        "operator cancels (occurrence or job cancel, or overlap replace)",
        (S.RUNNING,),
        "CANCEL",
        "running, not already asked; sets cancel_requested",
        (E.OCCURRENCE_CANCEL_REQUESTED,),
    ),
    Transition(
        (S.DEAD_LETTER,),
        "operator requeues",
        (S.RETRY_WAIT,),
        "REQUEUE",
        "dead_letter; fence and error code when given",
        (E.OCCURRENCE_REQUEUED,),
    ),
    Transition(
        (S.NEEDS_ADJUDICATION,),
        "operator adjudicates",
        (S.SUCCEEDED, S.RETRY_WAIT, S.DEAD_LETTER),
        "ADJUDICATE",
        "needs_adjudication",
        (E.OCCURRENCE_ADJUDICATED,),
    ),
    Transition(
        (S.AWAITING_APPROVAL,),
        "operator approves",
        (S.QUEUED,),
        "APPROVE",
        "awaiting_approval",
        (E.OCCURRENCE_APPROVED,),
    ),
    Transition(
        (S.AWAITING_APPROVAL,),
        "operator rejects",
        (S.SKIPPED,),
        "REJECT",
        "awaiting_approval; the budget reservation is released",
        (E.OCCURRENCE_REJECTED, E.BUDGET_RELEASED),
    ),
    Transition(
        (S.AWAITING_APPROVAL,),
        "Beat applies the approval timeout",
        (S.QUEUED, S.SKIPPED),
        "APPLY_APPROVAL_TIMEOUTS",
        "awaiting_approval, approval_due_at passed; CASE approval_auto approve -> queued",
        (E.OCCURRENCE_APPROVED, E.OCCURRENCE_REJECTED, E.BUDGET_RELEASED),
    ),
    Transition(
        (S.RETRY_WAIT,),
        "operator resumes",
        (S.RETRY_WAIT,),
        "MAKE_AVAILABLE",
        "retry_wait (control paused, see RESUME)",
        (E.OCCURRENCE_RESUMED,),
    ),
)

CONTROL_TRANSITIONS: tuple[Transition, ...] = (
    Transition(
        ("none", C.TERMINAL, C.RESUMED),
        "operator requests a pause",
        (C.PAUSE_REQUESTED,),
        "REQUEST_PAUSE",
        "occurrence running (fence when given), lease live; revision when given",
        (E.OCCURRENCE_PAUSE_REQUESTED,),
    ),
    Transition(
        (C.PAUSE_REQUESTED,),
        "worker claims again",
        (C.PAUSE_REQUESTED,),
        "REBIND_PAUSE_REQUEST",
        "pause_requested",
        (),
    ),
    Transition(
        (C.PAUSE_REQUESTED,),
        "worker acknowledges at a safe point",
        (C.PAUSED, C.TERMINAL),
        "ACK_PAUSE",
        "request id, fence, revision when given, safe point; CASE cancel -> terminal",
        (E.OCCURRENCE_PAUSED,),
    ),
    Transition(
        ("none", C.PAUSE_REQUESTED, C.RESUMED, C.TERMINAL),
        "worker hands back (warm shutdown)",
        (C.RESUMED, C.PAUSED),
        "HAND_BACK_CONTROL",
        "upsert; CASE pause pending for this fence -> paused",
        (E.OCCURRENCE_HANDED_BACK, E.OCCURRENCE_PAUSED),
    ),
    Transition(
        (C.PAUSED,),
        "operator resumes",
        (C.RESUMED,),
        "RESUME",
        "paused; revision when given",
        (E.OCCURRENCE_RESUMED,),
    ),
    Transition(
        (C.PAUSE_REQUESTED, C.PAUSED, C.RESUMED),
        "occurrence settles",
        (C.TERMINAL,),
        "TERMINATE_CONTROL",
        "not terminal",
        (E.CONTROL_TERMINAL,),
    ),
)


def allowed_pairs() -> frozenset[tuple[S, S]]:
    """Every (from, to) occurrence status change the table allows."""
    return frozenset(
        (S(a), S(b))
        for t in OCCURRENCE_TRANSITIONS
        for a in t.from_states
        for b in t.to_states
        if a in _STATUSES and (a != b or t.statement == "CLAIM")
    )


_STATUSES = {s.value for s in S}
