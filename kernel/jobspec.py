"""Job specs (SPEC §7): check every field a user wrote and return one normalised form.

The kernel stores ``JobSpec.to_dict()`` as a job's definition and snapshots it into
each occurrence; ``JobSpec.digest`` tells an identical re-apply (a no-op) from a change
(a new revision). So whatever means the same thing normalises to the same value:
durations become seconds (float), ``at`` becomes UTC text, defaults are filled in.
``to_dict()`` uses the spec's own field names, so it is itself a valid spec.

Payloads of the built-in kinds (any other kind's payload is any JSON object):

* ``task``: ``{"task": name, "args": [...], "kwargs": {...}}``
* ``callable``: ``{"callable": "pkg.module:function", "args": [...], "kwargs": {...}}``
* ``shell``: ``{"argv": [str, ...], "cwd": str | None, "env": {NAME: value},
  "env_allow": [NAME, ...], "output_limit": bytes}``. The child process sees only
  ``env`` plus the worker's own values of the names in ``env_allow``; nothing else of
  the worker's environment. ``output_limit`` (default 64 KiB, at most 10 MiB) bounds
  the captured output.
* ``http``: ``{"method": "GET", "url": "http(s)://...", "headers": {name: value}}``
  plus either ``"json": <any JSON>`` or ``"body": str``, not both.

Free-form payload text (args, kwargs, argv items, env values, body, json) may hold
``\\n`` and ``\\t``; every other string refuses all control characters (category Cc).
Lengths: ids, pools and ``after.job`` 128; queue and kind 64; other named strings 1024
(cron 256, url 2048, header values 8192); free-form text is bounded by the payload size.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Self
from urllib.parse import urlsplit

from kernel.durations import (
    Reader,
    boolean,
    canonical_json,
    child_path,
    choice,
    cron_expression,
    duration,
    instance,
    instant,
    integer,
    nullable,
    optional,
    parse_duration,
    payload_json,
    real,
    require,
    section,
    text,
    time_zone,
)
from kernel.errors import InvalidArgument
from kernel.states import Delivery, Overlap

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "SHELL_OUTPUT_LIMIT_DEFAULT",
    "After",
    "CatchupPolicy",
    "DstPolicy",
    "JobSpec",
    "RetryPolicy",
    "canonical_json",
    "parse_duration",
    "validate_job_spec",
]

#: Largest payload, measured as UTF-8 canonical JSON.
MAX_PAYLOAD_BYTES = 64 * 1024
#: Captured output of a shell job when its payload names no ``output_limit``.
SHELL_OUTPUT_LIMIT_DEFAULT = 64 * 1024
_SHELL_OUTPUT_LIMIT_MAX = 10 * 1024 * 1024


_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")
_KIND = re.compile(r"[a-z][a-z0-9_.-]{0,63}")
_PY_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_PY_PATH = re.compile(rf"{_PY_NAME}(?:\.{_PY_NAME})*:{_PY_NAME}(?:\.{_PY_NAME})*")
_ENV_NAME = re.compile(_PY_NAME)
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")

_HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")
_TOP_FIELDS = (
    "id", "kind", "payload", "schedule", "enabled", "queue", "max_attempts", "retry", "lease",
    "timeout", "overlap", "max_queued", "catchup", "delivery", "pool", "dst", "after",
)  # fmt: skip


class _Section:
    """A spec section: attribute ``<name>_s`` is key ``<name>`` (seconds) in its dict."""

    def to_dict(self) -> dict[str, Any]:
        """The section as the spec writes it, durations in seconds."""
        return {name.removesuffix("_s"): value for name, value in vars(self).items()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Self:
        """Inverse of :meth:`to_dict`; not re-validated."""
        return cls(**{name: d[name.removesuffix("_s")] for name in cls.__annotations__})


@dataclass(frozen=True)
class RetryPolicy(_Section):
    """Backoff after a retryable failure: ``backoff_s * factor**(n-1)`` capped at ``max_s``,
    spread by ± ``jitter`` (a fraction)."""

    backoff_s: float = 30.0
    factor: float = 2.0
    max_s: float = 3600.0
    jitter: float = 0.1


@dataclass(frozen=True)
class CatchupPolicy(_Section):
    """Which firings missed while Beat was down still run; ``window_s`` None = unbounded."""

    policy: str = "latest"
    window_s: float | None = None


@dataclass(frozen=True)
class DstPolicy(_Section):
    """Cron firings in a DST gap (``shift_forward`` | ``skip``) or fold (``first`` |
    ``last`` | ``both``)."""

    gap: str = "shift_forward"
    fold: str = "first"


@dataclass(frozen=True)
class After(_Section):
    """Chain trigger: fire when job ``job`` settles with outcome ``on`` (success, failure,
    complete), ``delay_s`` later, if ``condition`` (``contains:..``/``regex:..``) matches
    the parent's result text."""

    job: str
    on: str
    delay_s: float
    condition: str | None


@dataclass(frozen=True)
class JobSpec:
    """A validated, normalised job definition (build it with :func:`validate_job_spec`)."""

    id: str
    kind: str
    payload: dict[str, Any]
    schedule: dict[str, Any] | None
    enabled: bool
    queue: str
    max_attempts: int
    retry: RetryPolicy
    lease_s: float
    timeout_s: float | None
    overlap: Overlap
    max_queued: int
    catchup: CatchupPolicy
    delivery: Delivery
    pool: str | None
    dst: DstPolicy
    after: After | None

    def to_dict(self) -> dict[str, Any]:
        """The normalised spec as JSON-ready data, every field present, durations in seconds."""
        return {
            "id": self.id,
            "kind": self.kind,
            "payload": copy.deepcopy(self.payload),
            "schedule": None if self.schedule is None else dict(self.schedule),
            "enabled": self.enabled,
            "queue": self.queue,
            "max_attempts": self.max_attempts,
            "retry": self.retry.to_dict(),
            "lease": self.lease_s,
            "timeout": self.timeout_s,
            "overlap": self.overlap.value,
            "max_queued": self.max_queued,
            "catchup": self.catchup.to_dict(),
            "delivery": self.delivery.value,
            "pool": self.pool,
            "dst": self.dst.to_dict(),
            "after": None if self.after is None else self.after.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobSpec:
        """Rebuild a spec from :meth:`to_dict` output (a stored snapshot); not re-validated."""
        return cls(
            id=d["id"],
            kind=d["kind"],
            payload=copy.deepcopy(d["payload"]),
            schedule=None if d["schedule"] is None else dict(d["schedule"]),
            enabled=d["enabled"],
            queue=d["queue"],
            max_attempts=d["max_attempts"],
            retry=RetryPolicy.from_dict(d["retry"]),
            lease_s=d["lease"],
            timeout_s=d["timeout"],
            overlap=Overlap(d["overlap"]),
            max_queued=d["max_queued"],
            catchup=CatchupPolicy.from_dict(d["catchup"]),
            delivery=Delivery(d["delivery"]),
            pool=d["pool"],
            dst=DstPolicy.from_dict(d["dst"]),
            after=None if d["after"] is None else After.from_dict(d["after"]),
        )

    @property
    def digest(self) -> str:
        """SHA-256 (hex) of the canonical JSON of :meth:`to_dict`; equal meaning, equal digest."""
        return hashlib.sha256(canonical_json(self.to_dict(), "spec").encode()).hexdigest()


def validate_job_spec(raw: Mapping[str, object]) -> JobSpec:
    """Check every field of a job spec (SPEC §7) and return it normalised.

    Only ``id``, ``kind`` and ``payload`` are required; omitted fields take their
    defaults. ``null`` is accepted only where a field is nullable (schedule, timeout,
    pool, after, catchup.window, after.condition).

    Raises:
        InvalidArgument: the first field found wrong; ``field`` is its dotted path
            (``schedule.timezone``, ``retry.backoff``, ``payload.argv[2]``).
    """
    spec = section(raw, "", _TOP_FIELDS)
    require(spec, "", "id", "kind", "payload")
    job_id = text(128, _ID)(spec["id"], "id")
    kind = text(64, _KIND)(spec["kind"], "kind")
    after = optional(spec, "", "after", None, nullable(_after))
    if after is not None and after.job == job_id:
        raise InvalidArgument("after.job", "a job cannot be chained after itself")
    return JobSpec(
        id=job_id,
        kind=kind,
        payload=_payload(kind, spec["payload"]),
        schedule=optional(spec, "", "schedule", None, nullable(_schedule)),
        enabled=optional(spec, "", "enabled", True, boolean),
        queue=optional(spec, "", "queue", "celery", text(64, _ID)),
        max_attempts=optional(spec, "", "max_attempts", 3, integer(1, 1000)),
        retry=optional(spec, "", "retry", RetryPolicy(), _retry),
        lease_s=optional(spec, "", "lease", 60.0, duration(5, 86400)),
        timeout_s=optional(spec, "", "timeout", None, nullable(duration())),
        overlap=Overlap(optional(spec, "", "overlap", Overlap.SKIP.value, choice(*Overlap))),
        max_queued=optional(spec, "", "max_queued", 25, integer(1, 10000)),
        catchup=optional(spec, "", "catchup", CatchupPolicy(), _catchup),
        delivery=Delivery(
            optional(spec, "", "delivery", Delivery.AT_LEAST_ONCE.value, choice(*Delivery))
        ),
        pool=optional(spec, "", "pool", None, nullable(text(128, _ID))),
        dst=optional(spec, "", "dst", DstPolicy(), _dst),
        after=after,
    )


# --- sections -------------------------------------------------------------------------


def _schedule(value: object, field: str) -> dict[str, Any]:
    spec = section(value, field, ("cron", "timezone", "day_match", "every", "at", "in"))
    given = [name for name in ("cron", "every", "at", "in") if name in spec]
    if len(given) != 1:
        raise InvalidArgument(field, "must hold exactly one of cron, every, at, in")
    which = given[0]
    for cron_only in ("timezone", "day_match"):
        if which != "cron" and cron_only in spec:
            raise InvalidArgument(f"{field}.{cron_only}", "applies only to a cron schedule")
    if which == "cron":
        cron = {
            "cron": cron_expression(spec["cron"], f"{field}.cron"),
            "timezone": optional(spec, field, "timezone", "UTC", time_zone),
        }
        # "any" (standard cron: day of month OR weekday) is the default and is left
        # out, so that specs written before day_match existed keep their digest.
        if optional(spec, field, "day_match", "any", choice("any", "all")) == "all":
            cron["day_match"] = "all"
        return cron
    if which == "at":
        return {"at": instant(spec["at"], f"{field}.at")}
    return {which: duration(1.0 if which == "every" else 0.0)(spec[which], f"{field}.{which}")}


def _retry(value: object, field: str) -> RetryPolicy:
    spec = section(value, field, ("backoff", "factor", "max", "jitter"))
    d = RetryPolicy()
    policy = RetryPolicy(
        backoff_s=optional(spec, field, "backoff", d.backoff_s, duration()),
        factor=optional(spec, field, "factor", d.factor, real(1, 100)),
        max_s=optional(spec, field, "max", d.max_s, duration()),
        jitter=optional(spec, field, "jitter", d.jitter, real(0, 1)),
    )
    if policy.max_s < policy.backoff_s:
        raise InvalidArgument(f"{field}.max", f"must be at least {field}.backoff")
    return policy


def _catchup(value: object, field: str) -> CatchupPolicy:
    spec = section(value, field, ("policy", "window"))
    return CatchupPolicy(
        policy=optional(spec, field, "policy", "latest", choice("latest", "all", "none")),
        window_s=optional(spec, field, "window", None, nullable(duration())),
    )


def _dst(value: object, field: str) -> DstPolicy:
    spec = section(value, field, ("gap", "fold"))
    return DstPolicy(
        gap=optional(spec, field, "gap", "shift_forward", choice("shift_forward", "skip")),
        fold=optional(spec, field, "fold", "first", choice("first", "last", "both")),
    )


def _after(value: object, field: str) -> After:
    spec = section(value, field, ("job", "on", "delay", "condition"))
    require(spec, field, "job")
    return After(
        job=text(128, _ID)(spec["job"], f"{field}.job"),
        on=optional(spec, field, "on", "success", choice("success", "failure", "complete")),
        delay_s=optional(spec, field, "delay", 0.0, duration(allow_zero=True)),
        condition=optional(spec, field, "condition", None, nullable(_condition)),
    )


def _condition(value: object, field: str) -> str:
    condition = text(1024)(value, field)
    prefix, sep, pattern = condition.partition(":")
    if not sep or prefix not in ("contains", "regex") or not pattern:
        raise InvalidArgument(field, "must be 'contains:<text>' or 'regex:<pattern>'")
    if prefix == "regex":
        try:
            re.compile(pattern)
        except (re.error, OverflowError, RecursionError) as exc:
            raise InvalidArgument(field, f"regex does not compile: {exc}") from None
    return condition


# --- payloads -------------------------------------------------------------------------


def _payload(kind: str, value: object) -> dict[str, Any]:
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


def _shell(payload: dict[str, Any]) -> dict[str, Any]:
    section(payload, "payload", ("argv", "cwd", "env", "env_allow", "output_limit"))
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
    return {
        "argv": argv,
        "cwd": optional(payload, "payload", "cwd", None, nullable(text(1024))),
        "env": env,
        "env_allow": sorted(set(allow)),  # order and repeats mean nothing: one digest
        "output_limit": optional(
            payload,
            "payload",
            "output_limit",
            SHELL_OUTPUT_LIMIT_DEFAULT,
            integer(1, _SHELL_OUTPUT_LIMIT_MAX),
        ),
    }


def _http(payload: dict[str, Any]) -> dict[str, Any]:
    section(payload, "payload", ("method", "url", "headers", "json", "body"))
    require(payload, "payload", "url")
    method = text(16)(payload.get("method", "GET"), "payload.method").upper()
    choice(*_HTTP_METHODS)(method, "payload.method")
    headers = instance(dict, "an object of name: value")(
        payload.get("headers", {}), "payload.headers"
    )
    seen: set[str] = set()
    for name, header in headers.items():
        field = child_path("payload.headers", name)
        text(256, _HEADER_NAME)(name, field)
        text(8192, empty=True)(header, field)
        if name.lower() in seen:
            raise InvalidArgument(field, "repeats a header name (names ignore case)")
        seen.add(name.lower())
    shaped = {"method": method, "url": _url(payload["url"], "payload.url"), "headers": headers}
    if "json" in payload and "body" in payload:
        raise InvalidArgument("payload.body", "give json or body, not both")
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
