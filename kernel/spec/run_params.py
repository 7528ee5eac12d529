"""Run parameters: arguments for one occurrence only (Airflow's run ``conf``).

``run-now --params`` and ``backfill --params`` give a JSON object that is merged into the
job's payload as a JSON Merge Patch (RFC 7386: an object merges key by key, ``null``
removes a key, anything else replaces), for that occurrence's snapshot only: the job's
definition does not change. The merged spec is validated exactly as a definition is (the
payload's own checks, size, secrets in clear), a problem named under ``params``. The
params are part of the occurrence's idempotency key (:func:`params_digest`) and recorded
in its creation event.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from kernel.errors import InvalidArgument
from kernel.spec.durations import canonical_json
from kernel.spec.jobspec import validate_job_spec

__all__ = ["merge_patch", "params_digest", "with_params"]


def merge_patch(target: Any, patch: Any) -> Any:
    """``patch`` applied to ``target`` as RFC 7386 says; neither is changed."""
    if not isinstance(patch, Mapping):
        return patch
    merged = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def params_digest(params: Mapping[str, Any]) -> str:
    """A short digest of the params' canonical JSON (equal params, equal digest)."""
    return hashlib.sha256(canonical_json(params, "params").encode()).hexdigest()[:16]


def with_params(spec: dict[str, Any], params: object) -> dict[str, Any]:
    """The job's stored ``spec`` with ``params`` merged into its payload, validated.

    Raises:
        InvalidArgument: ``params`` is not a JSON object, or the merged payload is refused
            (``field`` ``params.<where>``, e.g. ``params.kwargs.n``).
    """
    if not isinstance(params, Mapping):
        raise InvalidArgument("params", "must be a JSON object (merged into the payload)")
    canonical_json(params, "params")
    merged = {**spec, "payload": merge_patch(spec["payload"], params)}
    try:
        return validate_job_spec(merged).to_dict()
    except InvalidArgument as exc:
        field = exc.field.replace("payload", "params", 1)
        message = exc.message.removeprefix(f"{exc.field}: ")
        details = {k: v for k, v in exc.details.items() if k != "field"}
        raise InvalidArgument(
            field, f"{message} (after merging the params into the payload)", **details
        ) from None
