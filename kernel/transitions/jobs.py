"""The transition table's rows of jobs and of their sources' ownership (see
:mod:`kernel.transitions.occurrences`).

A job is ``none`` (no row), ``enabled`` or ``disabled``. Beat's cursor lives on the
enabled job's row: planning and advancing it keep the job enabled. A job's ownership by
a source (a job file, the app's ``beat_schedule``) is ``none`` (no record), ``owned`` or
``retired`` (the source no longer lists it; :data:`SOURCE_RETIRES_JOB`).
"""

from __future__ import annotations

from kernel.events import EventType as E
from kernel.statements.jobs import (
    ADVANCE_CURSOR,
    COUNT_SCHEDULED_RUNS,
    DEFINE_JOB,
    DELETE_IDLE_JOB,
    EXPIRE_FINISHED_JOB,
    FORGET_JOB_SOURCE,
    MARK_UNPLANNABLE,
    OWN_JOBS,
    PLAN_CURSOR,
    RESTORE_LISTED_JOBS,
    RETIRE_JOB,
    RETIRE_UNLISTED_JOBS,
    REVISE_JOB,
    REVISE_LIVE_JOB,
    SET_ENABLED,
)
from kernel.transitions.door import Transition

__all__ = [
    "JOB_DEFINED",
    "JOB_REVISED",
    "LIVE_JOB_REVISED",
    "BEAT_PLANS_CURSOR",
    "BEAT_ADVANCES_CURSOR",
    "BEAT_CANNOT_PLAN_JOB",
    "OPERATOR_ENABLES_JOB",
    "OPERATOR_DISABLES_JOB",
    "OPERATOR_CANCELS_JOB",
    "SCHEDULE_RETIRES_JOB",
    "SCHEDULE_COUNTS_RUNS",
    "SOURCE_RETIRES_JOB",
    "SOURCE_RESTORES_JOB",
    "OPERATOR_DELETES_JOB",
    "RETENTION_EXPIRES_JOB",
    "JOB_TRANSITIONS",
    "SOURCE_OWNS_JOBS",
    "RETENTION_FORGETS_JOB_SOURCE",
    "JOB_SOURCE_TRANSITIONS",
]

NONE, ENABLED, DISABLED = "none", "enabled", "disabled"
_EITHER = (ENABLED, DISABLED)

JOB_DEFINED = Transition(
    (NONE,),
    "operator or job file defines a job",
    _EITHER,
    DEFINE_JOB,
    "no job of this id (a concurrent definer's row refuses it); its parent, chain and "
    "shared budget checked first; the cursor unplanned",
    (E.JOB_DEFINED,),
)
JOB_REVISED = Transition(
    _EITHER,
    "operator or job file revises a job",
    _EITHER,
    REVISE_JOB,
    "revision as read (else REVISION_CONFLICT); other content; the cursor is planned afresh",
    (E.JOB_REVISED,),
)
LIVE_JOB_REVISED = Transition(
    (ENABLED,),
    "operator or job file revises an enabled job that stays enabled",
    (ENABLED,),
    REVISE_LIVE_JOB,
    "revision as read; Beat resumes planning from the old cursor if it was already due, "
    "else from the edit",
    (E.JOB_REVISED,),
)
BEAT_PLANS_CURSOR = Transition(
    (ENABLED,),
    "Beat fires a job no Beat has planned",
    (ENABLED,),
    PLAN_CURSOR,
    "enabled at the revision Beat read, cursor unplanned; the firings it passed are made "
    "(BEAT_FIRES) in the same transaction",
    (),
)
BEAT_ADVANCES_CURSOR = Transition(
    (ENABLED,),
    "Beat fires a job",
    (ENABLED,),
    ADVANCE_CURSOR,
    "enabled at the revision Beat read, cursor as Beat planned from (another Beat got "
    "there first: stale, nothing made)",
    (),
)
BEAT_CANNOT_PLAN_JOB = Transition(
    (ENABLED,),
    "Beat cannot plan a job's schedule, or firing it is refused",
    (ENABLED,),
    MARK_UNPLANNABLE,
    "enabled at the revision Beat read, no error recorded for it yet (one event per "
    "revision); the revision's next fire, or a new revision, clears the error",
    (E.JOB_UNPLANNABLE,),
)
OPERATOR_ENABLES_JOB = Transition(
    (DISABLED,),
    "operator enables (or its source restores it)",
    (ENABLED,),
    SET_ENABLED,
    "disabled; the cursor is planned afresh from now, so a long pause does not burst",
    (E.JOB_ENABLED,),
)
OPERATOR_DISABLES_JOB = Transition(
    (ENABLED,),
    "operator disables (or its source retires it)",
    (DISABLED,),
    SET_ENABLED,
    "enabled",
    (E.JOB_DISABLED,),
)
OPERATOR_CANCELS_JOB = Transition(
    _EITHER,
    "operator cancels a job (and, with cascade, its chained jobs)",
    (DISABLED,),
    SET_ENABLED,
    "job row held; enabled -> disabled (a disabled job stays so); its waiting and running "
    "occurrences are then cancelled (OPERATOR_CANCELS)",
    (E.JOB_DISABLED, E.JOB_CANCELLED),
)
SCHEDULE_RETIRES_JOB = Transition(
    (ENABLED,),
    "Beat made its last firing (one-shot fired, schedule past its end, max_runs made)",
    (DISABLED,),
    RETIRE_JOB,
    "enabled at the revision Beat fired (kernel/jobs/retirement.py); its schedule spent: "
    "the firings it made still run",
    (E.JOB_DISABLED,),
)
SCHEDULE_COUNTS_RUNS = Transition(
    _EITHER,
    "Beat's firings or a backfill made runs of the job's schedule",
    _EITHER,
    COUNT_SCHEDULED_RUNS,
    "at the revision they were made under, its row held: the count max_runs bounds",
    (),
)
SOURCE_RETIRES_JOB = Transition(
    _EITHER,
    "its source (beat_schedule) no longer lists it",
    (DISABLED,),
    RETIRE_UNLISTED_JOBS,
    "owned by the source, not listed, not retired yet (one statement per listing); each "
    "is then disabled (OPERATOR_DISABLES_JOB)",
    (E.JOB_RETIRED,),
)
SOURCE_RESTORES_JOB = Transition(
    (DISABLED,),
    "a source lists a retired job (again, or moved to it from another source)",
    (ENABLED,),
    RESTORE_LISTED_JOBS,
    "listed by the source, retired (one statement per listing); each is then enabled "
    "(OPERATOR_ENABLES_JOB) and owned by the listing source",
    (E.JOB_RESTORED,),
)
OPERATOR_DELETES_JOB = Transition(
    _EITHER,
    "operator deletes a job",
    (NONE,),
    DELETE_IDLE_JOB,
    "job row held first; no unsettled occurrence, no job chained after it",
    (E.JOB_DELETED,),
)
RETENTION_EXPIRES_JOB = Transition(
    (DISABLED,),
    "retention deletes a finished job (delete_after_run, ttl)",
    (NONE,),
    EXPIRE_FINISHED_JOB,
    "disabled at the revision read, idle since the cutoff, every occurrence final and "
    "settled before it, no chained child, and (delete_after_run) at least one run",
    (E.JOB_EXPIRED,),
)

JOB_TRANSITIONS: tuple[Transition, ...] = (
    JOB_DEFINED,
    JOB_REVISED,
    LIVE_JOB_REVISED,
    BEAT_PLANS_CURSOR,
    BEAT_ADVANCES_CURSOR,
    BEAT_CANNOT_PLAN_JOB,
    OPERATOR_ENABLES_JOB,
    OPERATOR_DISABLES_JOB,
    OPERATOR_CANCELS_JOB,
    SCHEDULE_RETIRES_JOB,
    SCHEDULE_COUNTS_RUNS,
    SOURCE_RETIRES_JOB,
    SOURCE_RESTORES_JOB,
    OPERATOR_DELETES_JOB,
    RETENTION_EXPIRES_JOB,
)

OWNED, RETIRED = "owned", "retired"

SOURCE_OWNS_JOBS = Transition(
    (NONE, OWNED, RETIRED),
    "a source lists jobs (after SOURCE_RESTORES_JOB of the same listing)",
    (OWNED, RETIRED),
    OWN_JOBS,
    "the job exists (the listing's ids without a job are left out first); recorded owned "
    "by the source under its entry name, replacing another source's; one it had retired "
    "is owned again already, one another source retired stays retired",
    (),
)
RETENTION_FORGETS_JOB_SOURCE = Transition(
    (OWNED, RETIRED),
    "retention deleted the job (RETENTION_EXPIRES_JOB, same transaction)",
    (NONE,),
    FORGET_JOB_SOURCE,
    "the job's record, if it has one",
    (),
)

JOB_SOURCE_TRANSITIONS: tuple[Transition, ...] = (SOURCE_OWNS_JOBS, RETENTION_FORGETS_JOB_SOURCE)
