"""The transition table: open this first. Every transition of occurrences, runtime
controls, jobs, pools and budgets.

One row per (from states, trigger): the state it leads to, the statement in
:mod:`kernel.statements` that performs it, the guard in that statement's WHERE
(what must still hold when it writes), and the events it appends. Where the
outcome depends on the row (a cancel pending, attempts left), the statement
decides it (``CASE``), and the row lists every state it can reach. The rows of
occurrences are here; those of runtime controls in :mod:`kernel.transitions.controls`,
those of jobs in :mod:`kernel.transitions.jobs`,
those of pools and budgets (whose state is a counter: their rows name the condition
the guard decides, such as a pool's ``room`` or ``full``) in
:mod:`kernel.transitions.limits`.

The kernel performs a transition only through its row (:mod:`kernel.transitions.door`):
``door.run(tx, WORKER_SUCCEEDS, params)`` executes the row's statement, and any event a row
lists may be appended only in a transaction that ran a row listing it (``Tx.emit``
checks). tests/kernel/test_state_machine.py checks the kernel against these rows,
tests/kernel/test_transitions.py the rows themselves, tests/kernel/test_table_walk.py
that every statement changing one of these nouns is a row's.
"""

from __future__ import annotations

from kernel import statements as st
from kernel.events import EventType as E
from kernel.states import CLAIMABLE, WAITING
from kernel.states import OccurrenceStatus as S
from kernel.transitions.chords import CHORD_TRANSITIONS
from kernel.transitions.controls import CONTROL_TRANSITIONS
from kernel.transitions.door import LOGGED_ON_POSTGRES, Transition
from kernel.transitions.jobs import JOB_SOURCE_TRANSITIONS, JOB_TRANSITIONS
from kernel.transitions.limits import BUDGET_TRANSITIONS, POOL_TRANSITIONS, RATE_TRANSITIONS

__all__ = [
    "Transition", "OCCURRENCE_TRANSITIONS", "CONTROL_TRANSITIONS", "JOB_TRANSITIONS",
    "JOB_SOURCE_TRANSITIONS", "POOL_TRANSITIONS", "BUDGET_TRANSITIONS", "OPERATOR_CANCELS",
    "TRANSITIONS", "TRANSITION_EVENTS", "allowed_pairs", "statement_name",
]  # fmt: skip

_HELD = "running, owner and fence as held, lease live"

BEAT_FIRES = Transition(
    ("none",),
    "Beat fires, run-now or a chain (create)",
    (S.QUEUED, S.SKIPPED, S.AWAITING_APPROVAL),
    st.CREATE_OCCURRENCE,
    "unique (job, trigger key), which the idempotency key is made of; admitted "
    "(kernel.occurrences.firing.admit: overlap "
    "policy, max_queued; job row held) unless run-now --force; then the gates "
    "(kernel.occurrences.firing.create_gated): approval hold (awaiting_approval, or "
    "skipped approval_backlog "
    "past max_pending; not for run-now) and budget (RESERVE_BUDGET; skipped budget "
    "when spent)",
    (E.OCCURRENCE_CREATED, E.OCCURRENCE_SKIPPED),
)
TASK_ENQUEUED = Transition(
    ("none",),
    "a task is enqueued, or a settled run's link fires (create)",
    (S.QUEUED,),
    st.ENQUEUE_OCCURRENCE,
    "its job (task:<name>) exists, held FOR KEY SHARE on PostgreSQL; unique (job, "
    "trigger key) (task:<name>, key:<caller's key>): an existing or concurrently inserted key is "
    "not inserted again (one statement per batch of rows); a link (callbacks on success, "
    "errbacks on dead_letter) in the transaction of that settle, lease expiry or verdict",
    (E.OCCURRENCE_CREATED,),
    logged_on=LOGGED_ON_POSTGRES,
)
WORKER_CLAIMS = Transition(
    CLAIMABLE,
    "worker claims",
    (S.RUNNING,),
    st.CLAIM_BY_DIALECT,
    "fence as seen, available, no cancel, job enabled or the run manual; exclusive: "
    "unique running index, and no earlier exclusive one of the job could start first "
    "(BLOCKING_IN_JOB); pool: a slot taken first (TAKE_POOL_SLOT, running < limit)",
    (E.OCCURRENCE_CLAIMED,),
    logged_on=LOGGED_ON_POSTGRES,
)
WORKER_CLAIMS_QUEUED = Transition(
    (S.QUEUED,),
    "worker claims (one statement when queued, never leased)",
    (S.RUNNING,),
    st.CLAIM_QUEUED_BY_DIALECT,
    "queued, available, never leased, attempts left, no cancel, no control, no pool, "
    "neither exclusive nor at-most-once, job enabled or the run manual; any other claim "
    "is decided from a read (WORKER_CLAIMS, WORKER_RECLAIMS)",
    (E.OCCURRENCE_CLAIMED,),
    logged_on=LOGGED_ON_POSTGRES,
)
WORKER_RECLAIMS = Transition(
    (S.RUNNING,),
    "worker reclaims an expired lease",
    (S.RUNNING,),
    st.CLAIM_BY_DIALECT,
    "fence as seen, lease expired, at-least-once, lost leases left (lost_leases < "
    "max_lost_leases), no cancel, job enabled or the run manual; no attempt spent (nor "
    "needed), one lost lease counted; keeps its pool slot",
    (E.OCCURRENCE_CLAIMED,),
    logged_on=LOGGED_ON_POSTGRES,
)
WORKER_RENEWS = Transition((S.RUNNING,), "worker renews", (S.RUNNING,), st.RENEW, _HELD, ())
WORKER_SUCCEEDS = Transition(
    (S.RUNNING,),
    "worker succeeds",
    (S.SUCCEEDED,),
    st.SETTLE,
    _HELD + "; gives its pool slot back",
    (E.OCCURRENCE_SUCCEEDED,),
)
WORKER_SUCCEEDS_PLAIN = Transition(
    (S.RUNNING,),
    "worker succeeds (one statement when nothing else is owed)",
    (S.SUCCEEDED,),
    st.SUCCEED_PLAIN_BY_DIALECT,
    _HELD + "; no open control, no pool, no job chained after it, and on PostgreSQL the "
    "row unchanged since the statement's snapshot; the result reports no budget units "
    "(any other success is WORKER_SUCCEEDS)",
    (E.OCCURRENCE_SUCCEEDED,),
    logged_on=LOGGED_ON_POSTGRES,
)
WORKER_SUCCEEDS_AND_CLAIMS_NEXT = Transition(
    (S.RUNNING,),
    "worker succeeds and claims its batch's next occurrence (one statement, PostgreSQL)",
    (S.SUCCEEDED,),
    st.SUCCEED_AND_CLAIM_QUEUED,
    "WORKER_SUCCEEDS_PLAIN's for the run; the next occurrence is claimed (queued -> running) "
    "under WORKER_CLAIMS_QUEUED's guard, and only if the run settled; SQLite runs those "
    "two rows in turn",
    (E.OCCURRENCE_SUCCEEDED, E.OCCURRENCE_CLAIMED),
    logged_on=LOGGED_ON_POSTGRES,
)
WORKER_FAILS = Transition(
    (S.RUNNING,),
    "worker fails",
    (S.RETRY_WAIT, S.DEAD_LETTER, S.CANCELLED, S.NEEDS_ADJUDICATION),
    st.SETTLE,
    _HELD + "; CASE cancel_requested -> cancelled instead of retry_wait (or of an "
    "at-most-once run's adjudication); stored delivery at-most-once and effect unknown "
    "-> needs_adjudication, effect applied -> dead_letter instead of retry_wait; a "
    "retry_wait it decides stores the arguments the job code gave the retry (definition)",
    (
        E.OCCURRENCE_RETRY_WAIT,
        E.OCCURRENCE_DEAD_LETTER,
        E.OCCURRENCE_CANCELLED,
        E.OCCURRENCE_NEEDS_ADJUDICATION,
    ),
)
WORKER_STOPS_ON_CANCEL = Transition(
    (S.RUNNING,),
    "worker stops on cancel",
    (S.CANCELLED,),
    st.SETTLE,
    _HELD,
    (E.OCCURRENCE_CANCELLED,),
)
WORKER_RELEASES = Transition(
    (S.RUNNING,),
    "worker releases (pause ack / warm hand back)",
    (S.RETRY_WAIT, S.CANCELLED),
    st.RELEASE,
    _HELD + "; CASE cancel_requested -> cancelled",
    (E.OCCURRENCE_PAUSED, E.OCCURRENCE_HANDED_BACK, E.OCCURRENCE_CANCELLED),
)
LEASE_EXPIRES = Transition(
    (S.RUNNING,),
    "Beat expires a lease, or a claim meets one that its expiry settles",
    (S.CANCELLED, S.NEEDS_ADJUDICATION, S.DEAD_LETTER),
    st.EXPIRE,
    "running, fence as read, lease expired; CASE cancel / at-most-once / no lost lease "
    "left (dead_letter POISON_PILL)",
    (E.OCCURRENCE_CANCELLED, E.OCCURRENCE_NEEDS_ADJUDICATION, E.OCCURRENCE_DEAD_LETTER),
)
OPERATOR_CANCELS_WAITING = Transition(
    WAITING,
    "operator cancels (occurrence or job cancel, or overlap replace)",
    (S.CANCELLED,),
    st.CANCEL,
    "status waiting; a budget reservation of a run never begun is released (RESERVATION_RELEASED)",
    (E.OCCURRENCE_CANCELLED,),
)
OPERATOR_CANCELS_RUNNING = Transition(
    (S.RUNNING,),
    "operator cancels (occurrence or job cancel, or overlap replace)",
    (S.RUNNING,),
    st.CANCEL,
    "running, not already asked, stop_running (a revoke without terminate leaves it be); "
    "sets cancel_requested",
    (E.OCCURRENCE_CANCEL_REQUESTED,),
)
#: One CANCEL statement decides between the two rows (``CASE`` on the status).
OPERATOR_CANCELS = (OPERATOR_CANCELS_WAITING, OPERATOR_CANCELS_RUNNING)
OPERATOR_REQUEUES = Transition(
    (S.DEAD_LETTER,),
    "operator requeues",
    (S.RETRY_WAIT,),
    st.REQUEUE,
    "dead_letter; fence and error code when given",
    (E.OCCURRENCE_REQUEUED,),
)
OPERATOR_ADJUDICATES = Transition(
    (S.NEEDS_ADJUDICATION,),
    "operator adjudicates",
    (S.SUCCEEDED, S.RETRY_WAIT, S.DEAD_LETTER),
    st.ADJUDICATE,
    "needs_adjudication",
    (E.OCCURRENCE_ADJUDICATED,),
)
WORKER_ASKS_ADAPTER = Transition(
    (S.NEEDS_ADJUDICATION,),
    "worker asks the adapter (kernel/occurrences/adapter_verdicts.py)",
    (S.NEEDS_ADJUDICATION,),
    st.ASK_ADAPTER,
    "needs_adjudication; no ask at this fence yet, or the last one expired unanswered "
    "with asks left (MAX_ASKS); a new token and deadline",
    (E.OCCURRENCE_ADAPTER_ASKED,),
)
ADAPTER_ADJUDICATES = Transition(
    (S.NEEDS_ADJUDICATION,),
    "the adapter's verdict (applied / not_applied)",
    (S.SUCCEEDED, S.RETRY_WAIT),
    st.ADAPTER_ADJUDICATE,
    "needs_adjudication at the asked fence, ask token live (an operator's verdict "
    "first: refused STATE_CONFLICT; ask expired or replaced: LEASE_LOST)",
    (E.OCCURRENCE_ADJUDICATED,),
)
ADAPTER_CANNOT_TELL = Transition(
    (S.NEEDS_ADJUDICATION,),
    "the adapter cannot tell",
    (S.NEEDS_ADJUDICATION,),
    st.ADAPTER_CANNOT_TELL,
    "needs_adjudication at the asked fence, ask token live; no ask again at this fence",
    (E.OCCURRENCE_ADAPTER_CANNOT_TELL,),
)
OPERATOR_APPROVES = Transition(
    (S.AWAITING_APPROVAL,),
    "operator approves",
    (S.QUEUED,),
    st.APPROVE,
    "awaiting_approval",
    (E.OCCURRENCE_APPROVED,),
)
OPERATOR_REJECTS = Transition(
    (S.AWAITING_APPROVAL,),
    "operator rejects",
    (S.SKIPPED,),
    st.REJECT,
    "awaiting_approval; the budget reservation is released (RESERVATION_RELEASED)",
    (E.OCCURRENCE_REJECTED,),
)
APPROVAL_TIMES_OUT = Transition(
    (S.AWAITING_APPROVAL,),
    "Beat applies the approval timeout",
    (S.QUEUED, S.SKIPPED),
    st.APPLY_APPROVAL_TIMEOUTS,
    "awaiting_approval, approval_due_at passed; CASE approval_auto approve -> queued "
    "(a skipped one's budget reservation is released: RESERVATION_RELEASED)",
    (E.OCCURRENCE_APPROVED, E.OCCURRENCE_REJECTED),
)
OPERATOR_RESUMES = Transition(
    (S.RETRY_WAIT,),
    "operator resumes",
    (S.RETRY_WAIT,),
    st.MAKE_AVAILABLE,
    "retry_wait (control paused, see RESUME)",
    (E.OCCURRENCE_RESUMED,),
)

START_DEADLINE_PASSES = Transition(
    CLAIMABLE,
    "a claim or Beat's upkeep meets an occurrence past its start deadline (expires)",
    (S.SKIPPED,),
    st.SKIP_EXPIRED,
    "waiting, not paused, expires_at <= now; the skip-locked batch re-checked by the outer "
    "WHERE; a chord's member fails its chord (MEMBER_FAILS_CHORD), its links made never",
    (E.OCCURRENCE_SKIPPED,),
)

OCCURRENCE_TRANSITIONS: tuple[Transition, ...] = (
    BEAT_FIRES,
    TASK_ENQUEUED,
    WORKER_CLAIMS,
    WORKER_CLAIMS_QUEUED,
    WORKER_RECLAIMS,
    WORKER_RENEWS,
    WORKER_SUCCEEDS,
    WORKER_SUCCEEDS_PLAIN,
    WORKER_SUCCEEDS_AND_CLAIMS_NEXT,
    WORKER_FAILS,
    WORKER_STOPS_ON_CANCEL,
    WORKER_RELEASES,
    LEASE_EXPIRES,
    *OPERATOR_CANCELS,
    OPERATOR_REQUEUES,
    OPERATOR_ADJUDICATES,
    WORKER_ASKS_ADAPTER,
    ADAPTER_ADJUDICATES,
    ADAPTER_CANNOT_TELL,
    OPERATOR_APPROVES,
    OPERATOR_REJECTS,
    APPROVAL_TIMES_OUT,
    OPERATOR_RESUMES,
    START_DEADLINE_PASSES,
)

#: Every row of the table.
TRANSITIONS: tuple[Transition, ...] = (
    *OCCURRENCE_TRANSITIONS,
    *CONTROL_TRANSITIONS,
    *JOB_TRANSITIONS,
    *JOB_SOURCE_TRANSITIONS,
    *POOL_TRANSITIONS,
    *RATE_TRANSITIONS,
    *BUDGET_TRANSITIONS,
    *CHORD_TRANSITIONS,
)

#: Every event some row appends: only a transaction that ran such a row may append one.
TRANSITION_EVENTS: frozenset[str] = frozenset(e for t in TRANSITIONS for e in t.events)


def statement_name(transition: Transition) -> str:
    """The name of ``transition``'s statement in :mod:`kernel.statements`."""
    return next(name for name in st.__all__ if getattr(st, name) is transition.statement)


def allowed_pairs() -> frozenset[tuple[S, S]]:
    """Every (from, to) occurrence status change the table allows."""
    return frozenset(
        (S(a), S(b))
        for t in OCCURRENCE_TRANSITIONS
        for a in t.from_states
        for b in t.to_states
        if a in _STATUSES and (a != b or t.statement is st.CLAIM_BY_DIALECT)
    )


_STATUSES = {s.value for s in S}
