"""Secrets a job refers to by name, looked up on the worker when the run starts.

A job holds only the secret's name (shell ``payload.secrets``, http
``payload.secret_headers``), so the value is never stored in the kernel. A name is
looked up in the JSON object of the file named by ``KERNEL_SECRETS_FILE`` (``{"NAME":
"value"}``, read at each lookup so a rotated secret needs no restart), then in the
worker's environment. The values found are also what :func:`scrub` removes from a
run's captured output and error messages.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping

from adapters.base import AdapterError

__all__ = ["SECRETS_FILE_ENV", "resolve_secrets", "scrub"]

SECRETS_FILE_ENV = "KERNEL_SECRETS_FILE"
MASK = "***"


def resolve_secrets(names: Mapping[str, str]) -> dict[str, str]:
    """``{target: value}`` for ``{target: secret name}``.

    Raises:
        AdapterError: non-retryable ``SECRET_MISSING`` naming the secret (never a value),
            or ``SECRETS_FILE_UNREADABLE``.
    """
    if not names:
        return {}
    found = _secrets_file()
    values = {}
    for target, name in names.items():
        value = found.get(name, os.environ.get(name))
        if value is None:
            where = os.environ.get(SECRETS_FILE_ENV)
            source = f"the secrets file {where!r} or " if where else ""
            raise AdapterError(
                "SECRET_MISSING",
                f"secret {name!r} (for {target}) is not in {source}the worker's environment",
                retryable=False,
            )
        values[target] = value
    return values


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each secret value replaced by ``***``."""
    for value in sorted(set(secrets), key=len, reverse=True):
        if value:
            text = text.replace(value, MASK)
    return text


def _secrets_file() -> dict[str, str]:
    path = os.environ.get(SECRETS_FILE_ENV)
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as file:
            data = json.load(file)
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "it is not valid JSON"
        raise AdapterError(
            "SECRETS_FILE_UNREADABLE",
            f"cannot read {SECRETS_FILE_ENV}={path!r}: {reason}",
            retryable=True,
        ) from None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise AdapterError(
            "SECRETS_FILE_UNREADABLE",
            f"{SECRETS_FILE_ENV}={path!r} must hold a JSON object of name: string value",
            retryable=True,
        )
    return data
