"""Payloads of the built-in kinds as models: the one definition each adapter's input has.

The kernel stores what :func:`kernel.spec.payload_kinds.check_payload` returns (the
model's :meth:`Payload.to_dict` form) and the adapters read it through the same models
(:meth:`Payload.read`), so the rules and defaults live here only. Any other kind's
payload is any JSON object.

* ``task``: ``{"task": name, "args": [...], "kwargs": {...}}`` and, for a Celery call
  that gave them, ``"request"``: the fields of the body's ``self.request`` the call set
  (:class:`TaskRequest`: custom headers, message properties, time limits,
  ``ignore_result``, ``argsrepr``/``kwargsrepr``, stamps).
* ``callable``: ``{"callable": "pkg.module:function", "args": [...], "kwargs": {...}}``
* ``shell``: ``{"argv": [str, ...], "cwd": str | None, "env": {NAME: value},
  "env_allow": [NAME, ...], "secrets": {NAME: SECRET}, "output_limit": bytes}``. The
  child process sees only ``env``, the worker's own values of the names in
  ``env_allow``, and each ``secrets`` entry's value looked up on the worker by secret
  name (see ``adapters.secrets``); nothing else of the worker's environment, and never
  the worker's own settings (:func:`is_worker_setting`), refused here, so again by the
  adapter that reads the payload on the worker.
  ``output_limit`` (default 64 KiB, at most 10 MiB) bounds each stream kept in the result.
* ``http``: ``{"method": ..., "url": "http(s)://...", "headers": {name: value},
  "secret_headers": {name: SECRET}, "lookup": {...}, "follow_redirects": n}`` plus either
  ``"json": <any JSON>`` or ``"body": str``, not both. ``method`` defaults to POST when
  there is a body, else GET; ``follow_redirects`` (0-10) to 5 for GET, HEAD, PUT and
  DELETE, 0 for POST and PATCH.
* ``watchdog``: ``{"check": <a shell or callable payload>, "target": label, "watch_for":
  duration, "started_at": instant, "self_destruct": bool, "alert": {"channel": "http" |
  "task", "target": URL or task name}}``; what a check's report does is in
  :mod:`kernel.upkeep.watchdog_jobs`.

Secrets are referred to by name so that their values are never stored; values that
are stored anyway (``env``, ``Authorization``-like headers) are masked wherever the
kernel's data is shown (:mod:`kernel.redaction`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Self
from urllib.parse import urlsplit

from pydantic import AfterValidator, Discriminator, Field, Tag, ValidationError, model_validator

from kernel.errors import InvalidArgument
from kernel.spec.durations import child_path
from kernel.spec.fields import BOOLEAN, INSTANT, Check, choice, integer, refuse, seconds, text
from kernel.spec.problems import problems_of, raise_problems
from kernel.spec.sections import Section, TaskRequest

__all__ = [
    "SHELL_OUTPUT_LIMIT_DEFAULT",
    "CallablePayload",
    "HttpLookup",
    "HttpPayload",
    "Payload",
    "ShellPayload",
    "TaskPayload",
    "WatchdogAlert",
    "WatchdogPayload",
    "WATCHDOG_OUTPUT_TAIL",
    "is_worker_setting",
]

#: Bytes of each stream a shell result keeps when its payload names no ``output_limit``.
SHELL_OUTPUT_LIMIT_DEFAULT = 64 * 1024
_SHELL_OUTPUT_LIMIT_MAX = 10 * 1024 * 1024

_PY_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_PY_PATH = re.compile(rf"{_PY_NAME}(?:\.{_PY_NAME})*:{_PY_NAME}(?:\.{_PY_NAME})*")
_HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")
#: Redirects a GET, HEAD, PUT or DELETE follows when its job names no ``follow_redirects``;
#: a POST or PATCH follows none unless its job says so (its effect may be the server's).
_HTTP_IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE"})
HTTP_REDIRECTS_DEFAULT = 5

#: An environment variable's name, or a secret's name on the worker.
EnvName = Annotated[str, text(128, re.compile(_PY_NAME))]
HeaderName = Annotated[str, text(256, re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"))]


def is_worker_setting(name: str) -> bool:
    """Whether ``name`` is one of the worker's own settings: its kernel database, secrets
    file and other ``KERNEL_*`` settings, its broker (``CELERY_*``, ``BROKER_URL``)."""
    return name.startswith(("KERNEL_", "CELERY_")) or name == "BROKER_URL"


def _not_a_worker_setting(name: str) -> str:
    if is_worker_setting(name):
        raise refuse(
            f"{name} is one of the worker's own settings (KERNEL_*, CELERY_*, BROKER_URL), "
            "which no job may see"
        )
    return name


#: A variable of the worker's environment a job may be given: passed on (``env_allow``) or
#: looked up as a secret's name.
PassedName = Annotated[EnvName, AfterValidator(_not_a_worker_setting)]


class Payload(Section):
    """Base of the built-in payloads; :meth:`to_dict` is the normal form the kernel stores."""

    @classmethod
    def read(cls, payload: Mapping[str, Any]) -> Self:
        """A stored payload as this model, for an adapter: the rules it was defined under.

        Raises:
            InvalidArgument: it does not pass (a snapshot edited by hand, say).
        """
        try:
            return cls.model_validate(payload)
        except ValidationError as exc:
            raise_problems(problems_of(exc, cls, "payload"))
            raise  # raise_problems raised: pydantic reports at least one problem


class _Invocation(Payload):
    args: list[Any] = Field(default_factory=list, description="Positional arguments.")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments.")


class TaskPayload(_Invocation):
    """Run a registered Celery task's body."""

    task: Annotated[str, text(1024)] = Field(description="The task's registered name.")
    request: TaskRequest | None = Field(
        default=None,
        exclude_if=lambda value: value is None,  # a task job's normal form stays as it was
        description="Fields of the body's self.request a Celery call set.",
    )


class CallablePayload(_Invocation):
    """Call a Python function by import path."""

    callable: Annotated[str, text(1024, _PY_PATH)] = Field(
        description="'package.module:function' (or :Class.method)."
    )


def _names_a_program(argv: list[str]) -> list[str]:
    if not argv:
        raise refuse("must name a program")
    try:
        text(4096).read(argv[0], "")
    except InvalidArgument as exc:
        raise refuse(exc.message.removeprefix(": "), "[0]") from None
    return argv


class ShellPayload(Payload):
    """Run a program (no shell) with only the environment named here."""

    argv: Annotated[list[str], AfterValidator(_names_a_program)] = Field(
        description="The program and its arguments.", json_schema_extra={"minItems": 1}
    )
    cwd: Annotated[str, text(1024)] | None = Field(default=None, description="Working directory.")
    env: dict[EnvName, str] = Field(default_factory=dict, description="Variables set.")
    env_allow: list[PassedName] = Field(
        default_factory=list, description="Variables passed on from the worker."
    )
    secrets: dict[EnvName, PassedName] = Field(
        default_factory=dict, description="Variable: name of the worker's secret it holds."
    )
    output_limit: Annotated[int, integer(1, _SHELL_OUTPUT_LIMIT_MAX)] = Field(
        default=SHELL_OUTPUT_LIMIT_DEFAULT, description="Bytes of each stream kept in the result."
    )

    @model_validator(mode="after")
    def _each_name_once(self) -> Self:
        for index, name in enumerate(self.env_allow):
            if name in self.env:
                raise refuse(f"{name} is also set in env", f"env_allow[{index}]")
        for name in self.secrets:
            if name in self.env or name in self.env_allow:
                raise refuse(f"{name} is also set in env or env_allow", child_path("secrets", name))
        return self

    def to_dict(self) -> dict[str, Any]:
        body = super().to_dict()
        body["env_allow"] = sorted(set(self.env_allow))  # order and repeats mean nothing
        return body


def _method(value: str) -> str:
    if value.upper() not in _HTTP_METHODS:
        raise refuse(f"must be one of {', '.join(_HTTP_METHODS)}")
    return value.upper()


def _url(value: object, field: str) -> str:
    url: str = text(2048).read(value, field)
    try:
        parts = urlsplit(url)
        has_host = bool(parts.hostname) and parts.port != 0
    except ValueError as exc:  # a bad IPv6 literal or port
        raise InvalidArgument(field, f"is not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not has_host or any(c.isspace() for c in url):
        raise InvalidArgument(field, "must be an http:// or https:// URL with a host")
    return url


Status = Annotated[int, integer(100, 599)]


class HttpLookup(Payload):
    """How to ask the remote side whether the request with this Idempotency-Key took effect."""

    method: Annotated[str, text(16), AfterValidator(_method)] = Field(
        default="GET", description="The lookup's method."
    )
    url: Annotated[str, Check(_url, {"type": "string", "format": "uri"})] = Field(
        description="An http:// or https:// URL; the request's headers are sent with it."
    )
    applied: list[Status] = Field(
        default_factory=lambda: [200], description="Statuses meaning the request took effect."
    )
    not_applied: list[Status] = Field(
        default_factory=lambda: [404], description="Statuses meaning it did not."
    )

    @model_validator(mode="after")
    def _each_status_means_one_thing(self) -> Self:
        both = sorted(set(self.applied) & set(self.not_applied))
        if both:
            raise refuse(f"{both} cannot mean both applied and not applied", "not_applied")
        return self


class HttpPayload(Payload):
    """Send one HTTP request; a 2xx answer is success."""

    method: Annotated[str | None, text(16), AfterValidator(_method)] = Field(
        default=None, description="Default POST with a body, else GET."
    )
    url: Annotated[str, Check(_url, {"type": "string", "format": "uri"})] = Field(
        description="An http:// or https:// URL."
    )
    headers: dict[HeaderName, Annotated[str, text(8192, empty=True)]] = Field(
        default_factory=dict, description="Headers sent as written."
    )
    secret_headers: dict[HeaderName, PassedName] = Field(
        default_factory=dict, description="Header: name of the worker's secret it holds."
    )
    json_: Any = Field(default=None, alias="json", description="A JSON body (not with body).")
    body: str = Field(default="", description="A text body (not with json).")
    lookup: HttpLookup | None = Field(
        default=None, description="Ask the remote side about an uncertain run (at-most-once)."
    )
    follow_redirects: Annotated[int, integer(0, 10)] | None = Field(
        default=None,
        description=f"Redirects followed, each hop judged; default {HTTP_REDIRECTS_DEFAULT} for "
        "GET, HEAD, PUT and DELETE, 0 for POST and PATCH.",
    )

    @model_validator(mode="after")
    def _one_body_each_header_once(self) -> Self:
        if {"json_", "body"} <= self.model_fields_set:
            raise refuse("give json or body, not both", "body")
        seen: set[str] = set()
        for key, names in (("headers", self.headers), ("secret_headers", self.secret_headers)):
            for name in names:
                if name.lower() in seen:
                    raise refuse("repeats a header name (names ignore case)", child_path(key, name))
                seen.add(name.lower())
        return self

    @property
    def has_json(self) -> bool:
        """Whether ``json`` was given (``null`` included: the body is then ``null``)."""
        return "json_" in self.model_fields_set

    @property
    def has_body(self) -> bool:
        return "body" in self.model_fields_set

    @property
    def resolved_method(self) -> str:
        return self.method or ("POST" if self.has_json or self.has_body else "GET")

    @property
    def redirect_limit(self) -> int:
        """How many redirects the adapter follows for this request."""
        if self.follow_redirects is not None:
            return self.follow_redirects
        return HTTP_REDIRECTS_DEFAULT if self.resolved_method in _HTTP_IDEMPOTENT else 0

    def to_dict(self) -> dict[str, Any]:
        has_json, has_body = self.has_json, self.has_body
        shaped: dict[str, Any] = {
            "method": self.resolved_method,
            "url": self.url,
            "headers": dict(self.headers),
            "secret_headers": dict(self.secret_headers),
        }
        if has_body:
            shaped["body"] = self.body
        if has_json:
            shaped["json"] = self.json_
        if self.lookup is not None:  # absent, not null: digests of jobs without one stay
            shaped["lookup"] = self.lookup.to_dict()
        if self.follow_redirects is not None:  # absent likewise
            shaped["follow_redirects"] = self.follow_redirects
        return shaped


def _check_tag(value: Any) -> str | None:
    """A check naming ``callable`` is a function, any other object a command."""
    if isinstance(value, CallablePayload) or (isinstance(value, Mapping) and "callable" in value):
        return "<callable>"
    return "<shell>" if isinstance(value, ShellPayload | Mapping) else None


_CHECK_SHAPE = "must be a check: an object with argv (a command) or callable (a function)"
#: A watchdog's check: a command run as the shell kind runs it, or a function called.
WatchdogCheck = Annotated[
    Annotated[ShellPayload, Tag("<shell>")] | Annotated[CallablePayload, Tag("<callable>")],
    Discriminator(
        _check_tag,
        custom_error_type="spec",
        custom_error_message=_CHECK_SHAPE,
        custom_error_context={"message": _CHECK_SHAPE, "at": ""},
    ),
]
#: Characters of a failing check's output kept in a watchdog run's result and alert.
WATCHDOG_OUTPUT_TAIL = 1000
#: The seed's watch limit is whole minutes, at least one.
_MIN_WATCH_S = 60.0


class WatchdogAlert(Section):
    """Where a failing check's alert goes besides the kernel's ``watchdog_alert`` event."""

    channel: Annotated[str, choice("http", "task")] = Field(
        description="http: POST the alert as JSON to target; task: send the Celery task "
        "named target with the alert as its one argument."
    )
    target: Annotated[str, text(2048)] = Field(description="The URL, or the task's name.")

    @model_validator(mode="after")
    def _target_fits_channel(self) -> Self:
        if self.channel == "http":
            try:
                _url(self.target, "")
            except InvalidArgument as exc:
                raise refuse(exc.message.removeprefix(": "), "target") from None
        return self


class WatchdogPayload(Payload):
    """Run a check on the job's schedule; a failing check raises an alert."""

    check: WatchdogCheck = Field(
        description="A command ({argv, ...} as the shell kind) or a function ({callable, ...}); "
        "it fails by a non-zero exit, an exception, or the job's timeout."
    )
    target: Annotated[str, text(256)] | None = Field(
        default=None, description="What is watched, named in the alert."
    )
    watch_for_s: Annotated[float, seconds(_MIN_WATCH_S)] | None = Field(
        default=None,
        alias="watch_for",
        description="How long the watch lasts from started_at (null: no end).",
    )
    started_at: Annotated[str, INSTANT] | None = Field(
        default=None, description="When the watch began (null: when the job was last defined)."
    )
    self_destruct: Annotated[bool, BOOLEAN] = Field(
        default=True,
        description="Disable the job once the check passes or the watch is over.",
    )
    alert: WatchdogAlert | None = Field(default=None, description="Also send each alert here.")

    def to_dict(self) -> dict[str, Any]:
        body = super().to_dict()
        body["check"] = self.check.to_dict()
        return body
