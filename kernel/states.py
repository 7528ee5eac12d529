"""Occurrence and runtime-control states; the values are stored and must never change."""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "OccurrenceStatus",
    "ControlState",
    "Delivery",
    "Overlap",
    "Decision",
    "Effect",
    "SafePoint",
    "CLAIMABLE",
    "WAITING",
    "ACTIVE",
    "UNSETTLED",
    "SETTLED",
    "RESOLVED",
    "FAILED",
]


class OccurrenceStatus(StrEnum):
    #: Created and waiting for its first claim.
    QUEUED = "queued"
    #: Held by one worker under a lease; its fence names the holder.
    RUNNING = "running"
    #: Waiting for ``available_at`` (retry backoff, resume, requeue) or paused.
    RETRY_WAIT = "retry_wait"
    #: Finished; ``result`` holds the adapter's answer.
    SUCCEEDED = "succeeded"
    #: Gave up; ``last_error`` says why. Only an operator requeue revives it.
    DEAD_LETTER = "dead_letter"
    #: An at-most-once run whose outcome is unknown; an operator decides.
    NEEDS_ADJUDICATION = "needs_adjudication"
    #: Cancelled by an operator or replaced under the ``replace`` overlap policy.
    CANCELLED = "cancelled"
    #: A planned firing that was not run; ``skip_reason`` says why.
    SKIPPED = "skipped"
    #: Held for an operator's approve or reject (the job's ``approval`` gate); not
    #: claimable. At ``approval_due_at`` Beat applies the job's ``approval.auto``.
    AWAITING_APPROVAL = "awaiting_approval"


class ControlState(StrEnum):
    #: An operator asked a running occurrence to pause at its next safe point.
    PAUSE_REQUESTED = "pause_requested"
    #: The worker stored a checkpoint and handed the occurrence back.
    PAUSED = "paused"
    #: Claimable again; the next claim resumes from the checkpoint.
    RESUMED = "resumed"
    #: The occurrence settled; the control row is history.
    TERMINAL = "terminal"


class Delivery(StrEnum):
    AT_LEAST_ONCE = "at-least-once"
    AT_MOST_ONCE = "at-most-once"


class Overlap(StrEnum):
    SKIP = "skip"
    ALLOW = "allow"
    QUEUE = "queue"
    REPLACE = "replace"


class Decision(StrEnum):
    """A verdict on an occurrence in ``needs_adjudication``: an operator's, or an adapter's
    (``applied`` or ``not_applied`` only, see kernel/occurrences/adapter_verdicts.py)."""

    #: The effect happened: record success.
    APPLIED = "applied"
    #: The effect did not happen: make it runnable again.
    NOT_APPLIED = "not_applied"
    #: Give up: dead letter.
    ABANDON = "abandon"


class Effect(StrEnum):
    """What a failed run is known to have done, as its adapter classifies the failure.

    The settle decides from it and the occurrence's stored ``delivery``: an at-most-once
    run whose effect is ``unknown`` waits in ``needs_adjudication`` instead of retrying,
    and one whose effect is ``applied`` is not retried.
    """

    #: The effect certainly did not happen (refused before sending, connection refused,
    #: an answer saying no, a command that ran and reported failure).
    NOT_APPLIED = "not_applied"
    #: The effect happened although the run failed (an answer was cut after its status).
    APPLIED = "applied"
    #: It may or may not have happened (a timeout after sending, a connection lost
    #: mid-request, a command killed by its timeout or by a signal).
    UNKNOWN = "unknown"


class SafePoint(StrEnum):
    """Places where an adapter may be paused without losing work."""

    BEFORE_EXECUTE = "before_execute"
    ADAPTER_CHECKPOINT = "adapter_checkpoint"


# The status groups, each defined once here (tuples: an ``IN`` renders them in this
# order). A status is in exactly one of UNSETTLED and SETTLED; the others nest:
# CLAIMABLE < WAITING < ACTIVE < UNSETTLED.
_S = OccurrenceStatus

#: Statuses a claim may take: when ``available_at`` has come and no pause holds it (a
#: paused occurrence waits in retry_wait). The whole predicate, in SQL, is
#: :func:`kernel.statements.predicates.claimable_now`.
CLAIMABLE = (_S.QUEUED, _S.RETRY_WAIT)
#: Backlog: waiting to run, including what waits for an operator's approval.
WAITING = (*CLAIMABLE, _S.AWAITING_APPROVAL)
#: Running or waiting to run: what a job cancel ends or stops, what ``replace`` cancels.
ACTIVE = (*WAITING, _S.RUNNING)
#: Not yet settled: still needs its job's definition (an at-most-once run awaiting
#: adjudication may still be having its effect).
UNSETTLED = (*ACTIVE, _S.NEEDS_ADJUDICATION)
#: Finished for good (only an operator requeue revives a dead letter).
SETTLED = (_S.SUCCEEDED, _S.DEAD_LETTER, _S.CANCELLED, _S.SKIPPED)
#: Settled and resolved: the history retention may delete (a dead letter waits for an
#: operator's requeue).
RESOLVED = tuple(s for s in SETTLED if s != _S.DEAD_LETTER)
#: A failed run's settle: tried again later or given up (what a job's ``notify`` is
#: about).
FAILED = (_S.RETRY_WAIT, _S.DEAD_LETTER)
