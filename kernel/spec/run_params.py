"""Run parameters: arguments for one occurrence only (Airflow's run ``conf``).

``run-now --params`` and ``backfill --params`` give a JSON object whose keys are the
payload's arguments — ``args`` and ``kwargs`` of a call, ``json`` or ``body`` of a
request (:data:`RUN_ARGUMENTS`) — merged into them as a JSON Merge Patch (RFC 7386: an
object merges key by key, ``null`` removes a key, anything else replaces), for that
occurrence's snapshot only: the job's definition does not change. What runs, where and
with which secrets (``argv``, ``callable``, ``url``, ``secrets``, ``env``, ...) is the
definition, which only whoever may apply jobs changes, as a revision: a run parameter
naming it is refused, for every role, since an operator's run-now must not run a
program, reach a host or read a secret the job never named. The merged spec is validated
exactly as a definition is (the payload's own checks, size, secrets in clear), a problem
named under ``params``. The params are part of the occurrence's idempotency key
(:func:`params_digest`) and recorded in its creation event.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from kernel.errors import InvalidArgument
from kernel.spec.durations import canonical_json, child_path
from kernel.spec.jobspec import validate_job_spec

__all__ = ["RUN_ARGUMENTS", "merge_patch", "params_digest", "with_params"]

#: The payload fields a run parameter may set: a call's arguments, a request's body.
RUN_ARGUMENTS = ("args", "kwargs", "json", "body")


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
        InvalidArgument: ``params`` is not a JSON object, names a field outside
            :data:`RUN_ARGUMENTS`, or the merged payload is refused (``field``
            ``params.<where>``, e.g. ``params.kwargs.n``).
    """
    if not isinstance(params, Mapping):
        raise InvalidArgument("params", "must be a JSON object (merged into the payload)")
    canonical_json(params, "params")
    for key in params:
        if key not in RUN_ARGUMENTS:
            raise InvalidArgument(
                child_path("params", key),
                f"is the job's definition, not a run parameter: a run may be given "
                f"{', '.join(RUN_ARGUMENTS)}; change the job (jobs apply) to change {key}",
            )
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
