"""Payloads of the built-in kinds: the one place each adapter's input is checked.

The kernel stores what :func:`validate_payload` returns and the adapters run exactly
that, so they do not check it again. Any other kind's payload is any JSON object.

* ``task``: ``{"task": name, "args": [...], "kwargs": {...}}``
* ``callable``: ``{"callable": "pkg.module:function", "args": [...], "kwargs": {...}}``
* ``shell``: ``{"argv": [str, ...], "cwd": str | None, "env": {NAME: value},
  "env_allow": [NAME, ...], "secrets": {NAME: SECRET}, "output_limit": bytes}``. The
  child process sees only ``env``, the worker's own values of the names in
  ``env_allow``, and each ``secrets`` entry's value looked up on the worker by secret
  name (see ``adapters.secrets``); nothing else of the worker's environment.
  ``output_limit`` (default 64 KiB, at most 10 MiB) bounds each stream kept in the result.
* ``http``: ``{"method": ..., "url": "http(s)://...", "headers": {name: value},
  "secret_headers": {name: SECRET}}`` plus either ``"json": <any JSON>`` or
  ``"body": str``, not both. ``method`` defaults to POST when there is a body, else GET.

Secrets are referred to by name so that their values are never stored; values that
are stored anyway (``env``, ``Authorization``-like headers) are masked wherever the
kernel's data is shown (:mod:`kernel.redaction`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from kernel.durations import (
    Reader,
    canonical_json,
    child_path,
    choice,
    instance,
    integer,
    nullable,
    optional,
    payload_json,
    require,
    section,
    text,
)
from kernel.errors import InvalidArgument

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "SHELL_OUTPUT_LIMIT_DEFAULT",
    "validate_payload",
]

#: Largest payload, measured as UTF-8 canonical JSON.
MAX_PAYLOAD_BYTES = 64 * 1024
#: Bytes of each stream a shell result keeps when its payload names no ``output_limit``.
SHELL_OUTPUT_LIMIT_DEFAULT = 64 * 1024
_SHELL_OUTPUT_LIMIT_MAX = 10 * 1024 * 1024

_PY_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_PY_PATH = re.compile(rf"{_PY_NAME}(?:\.{_PY_NAME})*:{_PY_NAME}(?:\.{_PY_NAME})*")
_ENV_NAME = re.compile(_PY_NAME)
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")


def validate_payload(kind: str, value: object) -> dict[str, Any]:
    """Check ``value`` as the payload of a ``kind`` job and return its normal form.

    Raises:
        InvalidArgument: ``field`` names the offending key (``payload.argv[2]``).
    """
    if not isinstance(value, Mapping):
        raise InvalidArgument("payload", "must be an object")
    payload: dict[str, Any] = payload_json(value, "payload")
    shape = _PAYLOAD_SHAPES.get(kind)
    if shape is not None:
        payload = shape(payload)
    size = len(canonical_json(payload, "payload").encode())
    if size > MAX_PAYLOAD_BYTES:
        raise InvalidArgument(
            "payload", f"is {size} bytes as canonical JSON; the limit is {MAX_PAYLOAD_BYTES}"
        )
    return payload


def _invocation(target: str, check: Reader[str]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The task and callable shapes: a target plus ``args`` and ``kwargs``."""

    def shape(payload: dict[str, Any]) -> dict[str, Any]:
        section(payload, "payload", (target, "args", "kwargs"))
        require(payload, "payload", target)
        return {
            target: check(payload[target], f"payload.{target}"),
            "args": optional(payload, "payload", "args", [], instance(list, "an array")),
            "kwargs": optional(payload, "payload", "kwargs", {}, instance(dict, "an object")),
        }

    return shape


def _secret_names(payload: dict[str, Any], key: str, name: Reader[str]) -> dict[str, str]:
    """``{target: secret name}``: what receives a secret, and the secret's name."""
    field = f"payload.{key}"
    refs = instance(dict, "an object of name: secret name")(payload.get(key, {}), field)
    for target, secret in refs.items():
        name(target, child_path(field, target))
        text(128, _ENV_NAME)(secret, child_path(field, target))
    return dict(refs)


def _shell(payload: dict[str, Any]) -> dict[str, Any]:
    section(payload, "payload", ("argv", "cwd", "env", "env_allow", "secrets", "output_limit"))
    require(payload, "payload", "argv")
    argv = instance(list, "a non-empty array of strings")(payload["argv"], "payload.argv")
    if not argv:
        raise InvalidArgument("payload.argv", "must name a program")
    text(4096)(argv[0], "payload.argv[0]")
    for index, arg in enumerate(argv):
        instance(str, "a string")(arg, f"payload.argv[{index}]")
    env = instance(dict, "an object of NAME: value")(payload.get("env", {}), "payload.env")
    for name, setting in env.items():
        text(128, _ENV_NAME)(name, child_path("payload.env", name))
        instance(str, "a string")(setting, child_path("payload.env", name))
    allow = instance(list, "an array of names")(payload.get("env_allow", []), "payload.env_allow")
    for index, name in enumerate(allow):
        text(128, _ENV_NAME)(name, f"payload.env_allow[{index}]")
        if name in env:
            raise InvalidArgument(f"payload.env_allow[{index}]", f"{name} is also set in env")
    secrets = _secret_names(payload, "secrets", text(128, _ENV_NAME))
    for name in secrets:
        if name in env or name in allow:
            raise InvalidArgument(
                child_path("payload.secrets", name), f"{name} is also set in env or env_allow"
            )
    return {
        "argv": argv,
        "cwd": optional(payload, "payload", "cwd", None, nullable(text(1024))),
        "env": env,
        "env_allow": sorted(set(allow)),  # order and repeats mean nothing: one digest
        "secrets": secrets,
        "output_limit": optional(
            payload,
            "payload",
            "output_limit",
            SHELL_OUTPUT_LIMIT_DEFAULT,
            integer(1, _SHELL_OUTPUT_LIMIT_MAX),
        ),
    }


def _headers(payload: dict[str, Any], key: str, value: Reader[str]) -> dict[str, str]:
    field = f"payload.{key}"
    headers = instance(dict, "an object of name: value")(payload.get(key, {}), field)
    for name, header in headers.items():
        text(256, _HEADER_NAME)(name, child_path(field, name))
        value(header, child_path(field, name))
    return dict(headers)


def _http(payload: dict[str, Any]) -> dict[str, Any]:
    section(payload, "payload", ("method", "url", "headers", "secret_headers", "json", "body"))
    require(payload, "payload", "url")
    if "json" in payload and "body" in payload:
        raise InvalidArgument("payload.body", "give json or body, not both")
    has_body = "json" in payload or "body" in payload
    method = text(16)(payload.get("method", "POST" if has_body else "GET"), "payload.method")
    method = choice(*_HTTP_METHODS)(method.upper(), "payload.method")
    headers = _headers(payload, "headers", text(8192, empty=True))
    secret_headers = _headers(payload, "secret_headers", text(128, _ENV_NAME))
    seen: set[str] = set()
    for key, names in (("headers", headers), ("secret_headers", secret_headers)):
        for name in names:
            if name.lower() in seen:
                raise InvalidArgument(
                    child_path(f"payload.{key}", name), "repeats a header name (names ignore case)"
                )
            seen.add(name.lower())
    shaped = {
        "method": method,
        "url": _url(payload["url"], "payload.url"),
        "headers": headers,
        "secret_headers": secret_headers,
    }
    if "body" in payload:
        shaped["body"] = instance(str, "a string")(payload["body"], "payload.body")
    if "json" in payload:
        shaped["json"] = payload["json"]
    return shaped


def _url(value: object, field: str) -> str:
    url = text(2048)(value, field)
    try:
        parts = urlsplit(url)
        has_host = bool(parts.hostname) and parts.port != 0
    except ValueError as exc:  # a bad IPv6 literal or port
        raise InvalidArgument(field, f"is not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not has_host or any(c.isspace() for c in url):
        raise InvalidArgument(field, "must be an http:// or https:// URL with a host")
    return url


_PAYLOAD_SHAPES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "task": _invocation("task", text(1024)),
    "callable": _invocation("callable", text(1024, _PY_PATH)),
    "shell": _shell,
    "http": _http,
}
