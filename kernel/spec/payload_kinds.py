"""Which payload model each built-in kind takes, and the check of a job's payload against it.

A payload is a JSON object of at most :data:`MAX_PAYLOAD_BYTES` as canonical JSON; a
built-in kind's is also its model's (:mod:`kernel.spec.payloads`) normal form. Any other
kind's payload is any JSON object.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from kernel.errors import InvalidArgument
from kernel.spec.durations import canonical_json, payload_json
from kernel.spec.payloads import (
    CallablePayload,
    HttpPayload,
    Payload,
    ShellPayload,
    TaskPayload,
    WatchdogPayload,
)
from kernel.spec.problems import Problem, problems_of, raise_problems

__all__ = ["MAX_PAYLOAD_BYTES", "PAYLOAD_MODELS", "check_payload", "validate_payload"]

#: Largest payload, measured as UTF-8 canonical JSON.
MAX_PAYLOAD_BYTES = 64 * 1024

PAYLOAD_MODELS: dict[str, type[Payload]] = {
    "task": TaskPayload,
    "callable": CallablePayload,
    "shell": ShellPayload,
    "http": HttpPayload,
    "watchdog": WatchdogPayload,
}


def check_payload(kind: str, value: object) -> tuple[dict[str, Any], list[Problem]]:
    """``value`` as the normal payload of a ``kind`` job, and every problem found."""
    try:
        if not isinstance(value, Mapping):
            raise InvalidArgument("payload", "must be an object")
        payload: dict[str, Any] = payload_json(value, "payload")
    except InvalidArgument as exc:
        return {}, [Problem.of(exc)]
    model = PAYLOAD_MODELS.get(kind)
    if model is not None:
        try:
            payload = model.model_validate(payload).to_dict()
        except ValidationError as exc:
            return {}, problems_of(exc, model, "payload")
    try:
        size = len(canonical_json(payload, "payload").encode())
    except InvalidArgument as exc:
        return {}, [Problem.of(exc)]
    if size > MAX_PAYLOAD_BYTES:
        message = f"is {size} bytes as canonical JSON; the limit is {MAX_PAYLOAD_BYTES}"
        return {}, [Problem("payload", message)]
    return payload, []


def validate_payload(kind: str, value: object) -> dict[str, Any]:
    """Check ``value`` as the payload of a ``kind`` job and return its normal form.

    Raises:
        InvalidArgument: ``field`` names the first offending key (``payload.argv[2]``),
            ``details["errors"]`` lists every one when there are several.
    """
    payload, found = check_payload(kind, value)
    raise_problems(found)
    return payload
