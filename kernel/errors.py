"""Kernel errors: one exception tree, each with a stable code a script can match on."""

from __future__ import annotations

from typing import Any, Literal

__all__ = [
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
]

CommitState = Literal["not_committed", "unknown"]


class KernelError(Exception):
    """Base of every error the kernel raises on purpose.

    Attributes:
        code: stable, upper-case identifier (``LEASE_LOST``, ``NOT_FOUND`` ...).
        message: a sentence a person can act on.
        details: ids and values that explain the refusal (JSON-serialisable).
    """

    code = "KERNEL_ERROR"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            body["details"] = self.details
        return body

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class InvalidArgument(KernelError):
    """Input refused before anything was written; ``field`` names the culprit."""

    code = "INVALID_ARGUMENT"

    def __init__(self, field: str, message: str, **details: Any) -> None:
        super().__init__(f"{field}: {message}", field=field, **details)
        self.field = field
        # Rebuilt from its args by pickling and by Celery's result backend.
        self.args = (field, message)


class NotFound(KernelError):
    code = "NOT_FOUND"


class LeaseLost(KernelError):
    """A worker write named an (owner, fence) that no longer holds a live lease."""

    code = "LEASE_LOST"


class FenceConflict(KernelError):
    """The caller's expected fence is not the occurrence's current fence."""

    code = "FENCE_CONFLICT"


class RevisionConflict(KernelError):
    """The caller's expected revision (job or runtime control) is stale."""

    code = "REVISION_CONFLICT"


class StateConflict(KernelError):
    """The occurrence or job is not in a state that allows the action."""

    code = "STATE_CONFLICT"


class PauseUnsupported(KernelError):
    """The running adapter declared no pause capability (or not this safe point)."""

    code = "PAUSE_UNSUPPORTED"


class EvidenceConflict(KernelError):
    """A replayed request id arrived with different evidence than the first time."""

    code = "EVIDENCE_CONFLICT"


class SchemaUnknown(KernelError):
    """The database schema revision is missing, unknown or newer than this code."""

    code = "SCHEMA_UNKNOWN"


class StorageUnavailable(KernelError):
    """The database could not be written or reached.

    ``commit_state`` says whether the change is known not to have been committed
    (``not_committed``) or may have been (``unknown``, e.g. the connection dropped
    during COMMIT).
    """

    code = "STORAGE_UNAVAILABLE"

    def __init__(self, message: str, commit_state: CommitState, **details: Any) -> None:
        super().__init__(message, commit_state=commit_state, **details)
        self.commit_state = commit_state
        self.args = (message, commit_state)  # rebuilt from its args, as InvalidArgument


class PermissionDenied(KernelError):
    """The database refused the kernel's statement to the role it connects as (PostgreSQL
    SQLSTATE 42501); ``role`` and ``refused`` (the server's words) say who and what."""

    code = "PERMISSION_DENIED"
