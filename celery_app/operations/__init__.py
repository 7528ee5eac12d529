"""What the CLI and the HTTP API both do: resource shapes and operator actions.

Every function takes an open :class:`~kernel.Kernel` and returns JSON-ready data,
the shape ``kernel ... --json`` prints and ``/api/...`` answers. The kernel's
operator calls are made here and nowhere else, so a change to their parameters is
adapted in one module. Refusals are the kernel's :class:`~kernel.KernelError`;
an action's refusal carries the request id it was made under.
"""

from __future__ import annotations

from celery_app.operations.actions import (
    Action,
    act,
    adjudicate,
    cancel,
    cancel_job,
    decide_approval,
    new_request_id,
    pause,
    pause_refusal,
    requeue,
    resume,
    run_now,
    safe_points,
)
from celery_app.operations.backfill import MAX_BACKFILL, backfill, parse_params
from celery_app.operations.enqueue import enqueue_task, json_argument
from celery_app.operations.health import (
    STALE_BEAT_FACTOR,
    beat_health,
    beat_warning,
    schedule_findings,
    status,
    watchdog_warnings,
)
from celery_app.operations.history import (
    events,
    occurrence_detail,
    occurrence_events,
    output_chunks,
    prune,
    runtime_controls,
)
from celery_app.operations.jobs import (
    delete_job,
    describe_schedule,
    job_data,
    job_with_health,
    jobs_with_health,
    pools_list,
    pools_set,
    preview,
    set_job_enabled,
)
from celery_app.operations.revisions import job_revisions, revision_diff, spec_yaml
from celery_app.operations.runs import job_runs, throughput
from celery_app.operations.story import SKIPPED_BECAUSE, occurrence_story
from celery_app.operations.times import format_age, format_json, iso, utc, within_calendar
from celery_app.operations.why import nearest_firing, why_answer

__all__ = [
    "Action",
    "MAX_BACKFILL",
    "SKIPPED_BECAUSE",
    "STALE_BEAT_FACTOR",
    "act",
    "adjudicate",
    "backfill",
    "beat_health",
    "beat_warning",
    "cancel",
    "cancel_job",
    "decide_approval",
    "delete_job",
    "enqueue_task",
    "describe_schedule",
    "events",
    "format_age",
    "format_json",
    "iso",
    "job_data",
    "job_with_health",
    "jobs_with_health",
    "json_argument",
    "nearest_firing",
    "job_revisions",
    "job_runs",
    "new_request_id",
    "occurrence_detail",
    "occurrence_events",
    "occurrence_story",
    "output_chunks",
    "parse_params",
    "pause",
    "pause_refusal",
    "pools_list",
    "pools_set",
    "preview",
    "prune",
    "requeue",
    "resume",
    "revision_diff",
    "run_now",
    "runtime_controls",
    "safe_points",
    "schedule_findings",
    "set_job_enabled",
    "spec_yaml",
    "status",
    "throughput",
    "utc",
    "within_calendar",
    "watchdog_warnings",
    "why_answer",
]
