"""celery-kernel's durable SQL authority. Imports nothing from Celery or the other packages.

Everything the other packages use is exported here; they import no kernel submodule.
"""

from __future__ import annotations

from kernel.db.engine import (
    CONNECT_TIMEOUT_S,
    MIGRATE_COMMAND,
    STATEMENT_TIMEOUT_S,
    anchored_sqlite_url,
    create_kernel_engine,
    make_private_dir,
)
from kernel.db.process_id import current_pid
from kernel.errors import (
    EvidenceConflict,
    FenceConflict,
    InvalidArgument,
    KernelError,
    LeaseLost,
    NotFound,
    PauseUnsupported,
    PermissionDenied,
    RevisionConflict,
    SchemaUnknown,
    StateConflict,
    StorageUnavailable,
)
from kernel.events import EventType
from kernel.follow import EventCursor
from kernel.jobs.cancellation import JobCancel
from kernel.jobs.enqueueing import Enqueued, EnqueueRequest
from kernel.occurrences.operator import Revoked, carries_stamps
from kernel.records import checkpoint_copy
from kernel.redaction import MASK, holds_credential, is_sensitive_name, masked_url, redacted_spec
from kernel.reports import AdapterAsk, Adjudication, JobHealth, Notification, Verdict
from kernel.spec.durations import (
    EARLIEST_INSTANT,
    LATEST_INSTANT,
    MAX_DURATION_S,
    duration,
    parse_duration,
    text,
)
from kernel.spec.jobfile import job_file_schema
from kernel.spec.jobspec import (
    MAX_LOST_LEASES,
    SELF_FENCE_MARGIN_S,
    Budget,
    JobSpec,
    renew_interval,
    validate_job_spec,
)
from kernel.spec.notify import Notify
from kernel.spec.payloads import (
    WATCHDOG_OUTPUT_TAIL,
    CallablePayload,
    HttpPayload,
    Payload,
    ShellPayload,
    TaskPayload,
    WatchdogAlert,
    WatchdogPayload,
)
from kernel.spec.retry import attempts_left
from kernel.spec.run_params import with_params
from kernel.spec.sections import check_limit, read_budget
from kernel.spec.task_runs import caller_key, replacement_of, task_job_id
from kernel.states import (
    ACTIVE,
    CLAIMABLE,
    FAILED,
    SETTLED,
    ControlState,
    Decision,
    Delivery,
    Effect,
    OccurrenceStatus,
    Overlap,
    SafePoint,
)
from kernel.store import FireReport, Kernel
from kernel.types import (
    ActionResult,
    Beat,
    Claim,
    DispatchHint,
    Event,
    Firing,
    Job,
    Occurrence,
    PendingPause,
    Pool,
    RenewAnswer,
)
from kernel.upkeep.history_limits import LIMITED_STATUSES

__all__ = [
    "Kernel",
    "attempts_left",
    "MAX_LOST_LEASES",
    "EARLIEST_INSTANT",
    "LATEST_INSTANT",
    "MAX_DURATION_S",
    "duration",
    "LIMITED_STATUSES",
    "Notify",
    "with_params",
    "checkpoint_copy",
    "FireReport",
    "current_pid",
    "Firing",
    "JobCancel",
    "Enqueued",
    "caller_key",
    "Revoked",
    "carries_stamps",
    "replacement_of",
    "EnqueueRequest",
    "KernelError",
    "InvalidArgument",
    "NotFound",
    "LeaseLost",
    "FenceConflict",
    "RevisionConflict",
    "StateConflict",
    "PauseUnsupported",
    "EvidenceConflict",
    "SchemaUnknown",
    "StorageUnavailable",
    "PermissionDenied",
    "EventType",
    "EventCursor",
    "OccurrenceStatus",
    "ControlState",
    "Decision",
    "Effect",
    "Delivery",
    "Overlap",
    "SafePoint",
    "ActionResult",
    "Beat",
    "Claim",
    "DispatchHint",
    "Event",
    "Job",
    "JobHealth",
    "Notification",
    "Occurrence",
    "Pool",
    "RenewAnswer",
    "AdapterAsk",
    "Adjudication",
    "Verdict",
    "PendingPause",
    # the state groups the layers above test against
    "ACTIVE",
    "CLAIMABLE",
    "FAILED",
    "SETTLED",
    # the job spec: validation, its JSON Schema, the readers of its values, the payloads
    "Budget",
    "JobSpec",
    "SELF_FENCE_MARGIN_S",
    "check_limit",
    "read_budget",
    "renew_interval",
    "validate_job_spec",
    "job_file_schema",
    "parse_duration",
    "task_job_id",
    "text",
    "Payload",
    "CallablePayload",
    "HttpPayload",
    "ShellPayload",
    "TaskPayload",
    "WatchdogPayload",
    "WatchdogAlert",
    "WATCHDOG_OUTPUT_TAIL",
    # secrets in what is shown
    "MASK",
    "holds_credential",
    "is_sensitive_name",
    "masked_url",
    "redacted_spec",
    # the engine's construction
    "CONNECT_TIMEOUT_S",
    "STATEMENT_TIMEOUT_S",
    "MIGRATE_COMMAND",
    "anchored_sqlite_url",
    "create_kernel_engine",
    "make_private_dir",
]
