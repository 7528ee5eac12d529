"""celery-kernel's durable SQL authority. Imports nothing from Celery or the other packages."""

from __future__ import annotations

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
from kernel.jobs.cancellation import JobCancel
from kernel.jobs.enqueueing import Enqueued, EnqueueRequest
from kernel.records import checkpoint_copy
from kernel.spec.notify import Notify
from kernel.spec.run_params import with_params
from kernel.states import (
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
    AdapterAsk,
    Adjudication,
    Beat,
    Claim,
    DispatchHint,
    Event,
    Firing,
    Job,
    JobHealth,
    Notification,
    Occurrence,
    Pool,
    RenewAnswer,
    Verdict,
)
from kernel.upkeep.history_limits import LIMITED_STATUSES

__all__ = [
    "Kernel",
    "LIMITED_STATUSES",
    "Notify",
    "with_params",
    "checkpoint_copy",
    "FireReport",
    "Firing",
    "JobCancel",
    "Enqueued",
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
]
