"""``kernel enqueue`` and ``POST /api/enqueue``: a task's run through the kernel."""

from __future__ import annotations

import json
from typing import Any

from celery_app.enqueueing import enqueue_on
from kernel import InvalidArgument, Kernel

__all__ = ["enqueue_task", "json_argument"]


def json_argument(text: str | None, field: str, kind: type) -> Any:
    """``--args`` / ``--kwargs`` text as a JSON array / object (None: empty)."""
    if text is None:
        return kind()
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InvalidArgument(field, f"is not JSON: {exc}") from None
    if not isinstance(value, kind):
        expected = "an array" if kind is list else "an object"
        raise InvalidArgument(field, f"must be {expected} in JSON, not {type(value).__name__}")
    return value


def enqueue_task(kernel: Kernel, app: Any, task: str, **run: Any) -> dict[str, Any]:
    """Enqueue one run of ``task`` (``run``: :func:`celery_app.enqueue`'s keyword
    parameters but ``connection``): ``{"occurrence": {...}, "deduplicated": bool}``."""
    made = enqueue_on(kernel, app, task, **run)
    occurrence = kernel.get_occurrence(made.occurrence_id)
    return {"occurrence": occurrence.to_dict(), "deduplicated": made.deduplicated}
