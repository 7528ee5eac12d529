"""Event types of the kernel's log; the values are stored and must never change."""

from __future__ import annotations

from enum import StrEnum

from kernel.states import OccurrenceStatus

__all__ = ["EVENTS_OUTSIDE_THE_TABLE", "EventType", "settled_event"]


class EventType(StrEnum):
    #: A job id was defined for the first time (``spec``: the definition, secrets masked).
    JOB_DEFINED = "job_defined"
    #: A job's definition changed (revision + 1; ``spec``: the new one, secrets masked).
    JOB_REVISED = "job_revised"
    JOB_ENABLED = "job_enabled"
    JOB_DISABLED = "job_disabled"
    JOB_DELETED = "job_deleted"
    #: An operator asked for one run now (``manual:<request id>``).
    JOB_RUN_NOW = "job_run_now"
    #: Occurrences were made for a job's firings over a range (``kernel jobs backfill``).
    JOB_BACKFILLED = "job_backfilled"
    #: A firing was materialised as a queued occurrence.
    OCCURRENCE_CREATED = "occurrence_created"
    #: A firing was recorded but not run (``reason`` says why).
    OCCURRENCE_SKIPPED = "occurrence_skipped"
    OCCURRENCE_CLAIMED = "occurrence_claimed"
    OCCURRENCE_SUCCEEDED = "occurrence_succeeded"
    OCCURRENCE_RETRY_WAIT = "occurrence_retry_wait"
    OCCURRENCE_DEAD_LETTER = "occurrence_dead_letter"
    OCCURRENCE_CANCELLED = "occurrence_cancelled"
    OCCURRENCE_NEEDS_ADJUDICATION = "occurrence_needs_adjudication"
    #: A running occurrence was asked to stop; its worker sees it on renew.
    OCCURRENCE_CANCEL_REQUESTED = "occurrence_cancel_requested"
    OCCURRENCE_PAUSE_REQUESTED = "occurrence_pause_requested"
    #: The holder stored a checkpoint at a safe point and handed the run back paused.
    OCCURRENCE_PAUSED = "occurrence_paused"
    OCCURRENCE_RESUMED = "occurrence_resumed"
    #: Warm shutdown: handed back unpaused, claimable at once from its checkpoint.
    OCCURRENCE_HANDED_BACK = "occurrence_handed_back"
    OCCURRENCE_REQUEUED = "occurrence_requeued"
    OCCURRENCE_ADJUDICATED = "occurrence_adjudicated"
    #: The occurrence settled while its runtime control was still open (pending pause).
    CONTROL_TERMINAL = "control_terminal"
    #: A chained child was not fired: the chain is deeper than allowed.
    CHAIN_DEPTH_EXCEEDED = "chain_depth_exceeded"
    HISTORY_PRUNED = "history_pruned"
    #: A job's source (``beat_schedule``) no longer lists it: disabled, kept for history.
    JOB_RETIRED = "job_retired"
    #: A retired job's source lists it again: enabled.
    JOB_RESTORED = "job_restored"
    #: Output a run wrote (stdout/stderr, ``ctx.logger``), stored by its fenced holder.
    RUN_OUTPUT = "run_output"
    #: A Beat stopped cleanly and left the registry.
    BEAT_STOPPED = "beat_stopped"
    #: A Beat silent for longer than the retention was removed from the registry.
    BEAT_FORGOTTEN = "beat_forgotten"
    #: An occurrence awaiting approval was approved (``auto``: by its timeout): queued.
    OCCURRENCE_APPROVED = "occurrence_approved"
    #: An occurrence awaiting approval was rejected (``auto``: by its timeout): skipped.
    OCCURRENCE_REJECTED = "occurrence_rejected"
    #: An occurrence ended without running: its budget reservation no longer counts.
    BUDGET_RELEASED = "budget_released"
    #: A chained child was not fired: its parent's fan-out bound (``after.fanout``) was hit.
    CHAIN_FANOUT_EXCEEDED = "chain_fanout_exceeded"
    #: A settled run's callback or errback was not made: its task's job was deleted since
    #: the run was enqueued (``reason``, the link's ``trigger_key``).
    LINK_NOT_MADE = "link_not_made"
    #: A run replaced itself (Celery's ``self.replace``): its settle made its replacement
    #: (``replaced_by``: the occurrences made now, ``task_id``: the task id taken over).
    OCCURRENCE_REPLACED = "occurrence_replaced"
    #: A chord's last member succeeded: its body was made (``chord_id``, ``body``: its key).
    CHORD_COMPLETED = "chord_completed"
    #: A chord's member failed for good (dead letter or cancel): its body is never made,
    #: its errbacks were (``chord_id``, ``body_task``, ``body_task_id``, ``member_task_id``,
    #: ``reason``).
    CHORD_FAILED = "chord_failed"
    #: An operator cancelled a job (``kernel jobs cancel``): disabled, its work cancelled.
    JOB_CANCELLED = "job_cancelled"
    #: Retention deleted a finished job (``delete_after_run`` or ``ttl``).
    JOB_EXPIRED = "job_expired"
    #: The watchdog found a job's fire cursor overdue (no Beat materialised it in time).
    WATCHDOG_OVERDUE = "watchdog_overdue"
    #: The watchdog found a run still going past its timeout.
    WATCHDOG_OVERRUN = "watchdog_overrun"
    #: The watchdog found an occurrence claimable for long with nothing holding it, unclaimed.
    WATCHDOG_STRANDED = "watchdog_stranded"
    #: A pool's limit was set (``kernel pools set``, or a job file's ``pools:``).
    POOL_LIMIT_SET = "pool_limit_set"
    #: A watchdog job's check failed (kernel.upkeep.watchdog_jobs): the alert of record.
    WATCHDOG_ALERT = "watchdog_alert"
    #: A worker asked the occurrence's adapter whether its uncertain run took effect.
    OCCURRENCE_ADAPTER_ASKED = "occurrence_adapter_asked"
    #: The adapter could not tell (``reason``): the occurrence waits for an operator.
    OCCURRENCE_ADAPTER_CANNOT_TELL = "occurrence_adapter_cannot_tell"
    #: Beat passed firings missed while it was down (``count`` of them, however many; the
    #: oldest ``recorded`` are also skipped occurrences), from ``first_at`` until ``until_at``.
    FIRINGS_MISSED = "firings_missed"
    #: A pool's counter differed from the slots its running occurrences hold (``was``):
    #: Beat's upkeep set it to ``running``.
    POOL_RECONCILED = "pool_reconciled"
    #: A failed run's notification was recorded (a job's ``notify``; ``notification_id``).
    NOTIFICATION_RECORDED = "notification_recorded"
    #: A try delivered the notification (the task was sent, the endpoint answered 2xx).
    NOTIFICATION_DELIVERED = "notification_delivered"
    #: A try failed (``error``): tried again at ``next_at``, or given up (``gave_up``).
    NOTIFICATION_FAILED = "notification_failed"
    #: Beat could not plan (or fire) the job's ``revision``: ``error`` says why; Beat
    #: fires none of it until a new revision (``kernel status``/``doctor`` list it).
    JOB_UNPLANNABLE = "job_unplannable"


_SETTLED = {
    OccurrenceStatus.SUCCEEDED: EventType.OCCURRENCE_SUCCEEDED,
    OccurrenceStatus.RETRY_WAIT: EventType.OCCURRENCE_RETRY_WAIT,
    OccurrenceStatus.DEAD_LETTER: EventType.OCCURRENCE_DEAD_LETTER,
    OccurrenceStatus.CANCELLED: EventType.OCCURRENCE_CANCELLED,
    OccurrenceStatus.NEEDS_ADJUDICATION: EventType.OCCURRENCE_NEEDS_ADJUDICATION,
}


def settled_event(status: str) -> EventType:
    """The event a run ending in ``status`` appends."""
    return _SETTLED[OccurrenceStatus(status)]


#: The only events no row lists, each with why it changes no state of the table's nouns.
#: ``Tx.emit`` refuses one of the others unless a transition of its transaction lists it.
_E = EventType
EVENTS_OUTSIDE_THE_TABLE: dict[EventType, str] = {
    _E.JOB_RUN_NOW: "records an operator's request; the occurrence it makes is BEAT_FIRES",
    _E.JOB_BACKFILLED: "records an operator's request; the occurrences it makes are BEAT_FIRES",
    _E.FIRINGS_MISSED: "counts firings Beat passed without making them; the cursor is a row's",
    _E.CHAIN_DEPTH_EXCEEDED: "a chained child not made: nothing changed",
    _E.CHAIN_FANOUT_EXCEEDED: "a chained child not made: nothing changed",
    _E.LINK_NOT_MADE: "a run's link not made: nothing changed",
    _E.OCCURRENCE_REPLACED: "tells what a success made; WORKER_SUCCEEDS and TASK_ENQUEUED move",
    _E.RUN_OUTPUT: "a run's output, stored by its fenced holder; no state moves",
    _E.HISTORY_PRUNED: "settled history deleted; no live state moves",
    _E.BEAT_STOPPED: "a Beat left the registry of Beats, which holds no state of the table",
    _E.BEAT_FORGOTTEN: "a silent Beat removed from the registry of Beats",
    _E.WATCHDOG_OVERDUE: "an observation of a late cursor; nothing changed",
    _E.WATCHDOG_OVERRUN: "an observation of a long run; nothing changed",
    _E.WATCHDOG_STRANDED: "an observation of a run nothing holds and nothing took; nothing changed",
    _E.WATCHDOG_ALERT: "a watchdog job's failed check, the alert of record",
    _E.NOTIFICATION_RECORDED: "a delivery of the notification outbox, not a noun of the table",
    _E.NOTIFICATION_DELIVERED: "a delivery try of the notification outbox",
    _E.NOTIFICATION_FAILED: "a delivery try of the notification outbox",
}
