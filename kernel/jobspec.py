"""Job specs (SPEC §7): check every field a user wrote and return one normalised form.

The kernel stores ``JobSpec.to_dict()`` as a job's definition and snapshots it into
each occurrence; ``JobSpec.digest`` tells an identical re-apply (a no-op) from a change
(a new revision). So whatever means the same thing normalises to the same value:
durations become seconds (float), ``at`` becomes UTC text, defaults are filled in.
``to_dict()`` uses the spec's own field names, so it is itself a valid spec.

Payloads of the built-in kinds are checked by :mod:`kernel.payloads`.

Effects stay inside the lease (the self-fencing rule): a worker renews every
:func:`renew_interval` seconds; when it has not renewed for ``lease - kill_grace -
SELF_FENCE_MARGIN_S`` seconds it stops the run's effects (SIGTERM to a shell group,
``ctx.cancelled`` for in-process code) and ``kill_grace`` later, still
``SELF_FENCE_MARGIN_S`` before the lease can expire, it kills what is left (SIGKILL to
the group; the pool process exits). A spec is refused unless one renewal fits before
that: ``lease >= renew_interval(lease) + kill_grace + SELF_FENCE_MARGIN_S``.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

from kernel.durations import (
    boolean,
    canonical_json,
    choice,
    cron_expression,
    duration,
    instant,
    integer,
    nullable,
    optional,
    parse_duration,
    real,
    require,
    section,
    text,
    time_zone,
)
from kernel.errors import InvalidArgument
from kernel.payloads import MAX_PAYLOAD_BYTES, SHELL_OUTPUT_LIMIT_DEFAULT, validate_payload
from kernel.states import Delivery, Overlap

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "ONE_SHOT",
    "SELF_FENCE_MARGIN_S",
    "SHELL_OUTPUT_LIMIT_DEFAULT",
    "After",
    "CatchupPolicy",
    "DstPolicy",
    "JobSpec",
    "OutputPolicy",
    "RetryPolicy",
    "canonical_json",
    "parse_duration",
    "renew_interval",
    "validate_job_spec",
]

#: Seconds between a run's lease renewals never exceed this: pause and cancel requests
#: arrive with the renewal's answer, so a long lease must not mean a long wait for them.
MAX_RENEW_INTERVAL_S = 2.0
#: Effects are gone this long before the lease can expire (clock rates, scheduling).
SELF_FENCE_MARGIN_S = 1.0
_RENEW_FRACTION = 3
_OUTPUT_LIMIT_MAX = 1024 * 1024

#: The schedules that fire once.
ONE_SHOT = frozenset({"at", "in"})
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")
_KIND = re.compile(r"[a-z][a-z0-9_.-]{0,63}")
_TOP_FIELDS = (
    "id", "kind", "payload", "schedule", "enabled", "queue", "max_attempts", "retry", "lease",
    "timeout", "overlap", "max_queued", "catchup", "delivery", "pool", "dst", "after",
    "kill_grace", "output", "delete_after_run", "ttl",
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
    the parent's result text (on a failure: its error, ``CODE: message``)."""

    job: str
    on: str
    delay_s: float
    condition: str | None
    #: At most this many children of ``job`` fire per parent outcome (the smallest
    #: bound its children declare); omitted from the dict at its default.
    fanout: int = 25

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        if self.fanout == After.fanout:
            del d["fanout"]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            job=d["job"],
            on=d["on"],
            delay_s=d["delay"],
            condition=d["condition"],
            fanout=d.get("fanout", cls.fanout),
        )


@dataclass(frozen=True)
class OutputPolicy(_Section):
    """A run's captured output (shell stdout/stderr, ``ctx.logger`` lines): at most
    ``limit`` bytes stored per run (the tail), and an ``excerpt`` of at most that many
    bytes (the tail) in error messages and ``occurrences show``."""

    limit: int = 64 * 1024
    excerpt: int = 2048


def renew_interval(lease_s: float) -> float:
    """Seconds between a run's lease renewals: a third of the lease, at most 2 s."""
    return min(lease_s / _RENEW_FRACTION, MAX_RENEW_INTERVAL_S)


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
    kill_grace_s: float = 2.0
    output: OutputPolicy = OutputPolicy()
    #: A one-shot ``at`` job is deleted (by Beat's retention) once it ran and settled.
    delete_after_run: bool = False
    #: A finished one-shot or disabled job is deleted this long after it finished.
    ttl_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The normalised spec as JSON-ready data, durations in seconds; fields added later
        (delete_after_run, ttl) only when set, so older jobs keep their digest."""
        optional_fields: dict[str, Any] = {}
        if self.delete_after_run:
            optional_fields["delete_after_run"] = True
        if self.ttl_s is not None:
            optional_fields["ttl"] = self.ttl_s
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
            "kill_grace": self.kill_grace_s,
            "output": self.output.to_dict(),
            **optional_fields,
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
            # Snapshots stored before these fields existed take their defaults.
            kill_grace_s=d.get("kill_grace", cls.kill_grace_s),
            output=OutputPolicy.from_dict(d["output"]) if "output" in d else OutputPolicy(),
            delete_after_run=d.get("delete_after_run", False),
            ttl_s=d.get("ttl"),
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
    lease_s = optional(spec, "", "lease", 60.0, duration(5, 86400))
    kill_grace_s = optional(spec, "", "kill_grace", JobSpec.kill_grace_s, duration(0.1, 3600))
    needed = renew_interval(lease_s) + kill_grace_s + SELF_FENCE_MARGIN_S
    if lease_s < needed:
        raise InvalidArgument(
            "lease",
            f"{lease_s:g}s is too short for kill_grace {kill_grace_s:g}s: a worker renews "
            f"every {renew_interval(lease_s):.3g}s and must stop a run's effects "
            f"{kill_grace_s:g}s + {SELF_FENCE_MARGIN_S:g}s before its lease can expire; "
            f"use a lease of at least {needed:.3g}s or a shorter kill_grace",
        )
    schedule = optional(spec, "", "schedule", None, nullable(_schedule))
    delete_after_run = optional(spec, "", "delete_after_run", False, boolean)
    if delete_after_run and not ONE_SHOT & set(schedule or ()):
        raise InvalidArgument(
            "delete_after_run", "applies only to a one-shot job (schedule 'at' or 'in')"
        )
    return JobSpec(
        id=job_id,
        kind=kind,
        payload=validate_payload(kind, spec["payload"]),
        schedule=schedule,
        enabled=optional(spec, "", "enabled", True, boolean),
        queue=optional(spec, "", "queue", "celery", text(64, _ID)),
        max_attempts=optional(spec, "", "max_attempts", 3, integer(1, 1000)),
        retry=optional(spec, "", "retry", RetryPolicy(), _retry),
        lease_s=lease_s,
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
        kill_grace_s=kill_grace_s,
        output=optional(spec, "", "output", OutputPolicy(), _output),
        delete_after_run=delete_after_run,
        ttl_s=optional(spec, "", "ttl", None, nullable(duration())),
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


def _output(value: object, field: str) -> OutputPolicy:
    spec = section(value, field, ("limit", "excerpt"))
    d = OutputPolicy()
    policy = OutputPolicy(
        limit=optional(spec, field, "limit", d.limit, integer(0, _OUTPUT_LIMIT_MAX)),
        excerpt=optional(spec, field, "excerpt", d.excerpt, integer(0, 64 * 1024)),
    )
    if policy.excerpt > policy.limit:
        raise InvalidArgument(f"{field}.excerpt", f"must be at most {field}.limit")
    return policy


def _dst(value: object, field: str) -> DstPolicy:
    spec = section(value, field, ("gap", "fold"))
    return DstPolicy(
        gap=optional(spec, field, "gap", "shift_forward", choice("shift_forward", "skip")),
        fold=optional(spec, field, "fold", "first", choice("first", "last", "both")),
    )


def _after(value: object, field: str) -> After:
    spec = section(value, field, ("job", "on", "delay", "condition", "fanout"))
    require(spec, field, "job")
    return After(
        job=text(128, _ID)(spec["job"], f"{field}.job"),
        on=optional(spec, field, "on", "success", choice("success", "failure", "complete")),
        delay_s=optional(spec, field, "delay", 0.0, duration(allow_zero=True)),
        condition=optional(spec, field, "condition", None, nullable(_condition)),
        fanout=optional(spec, field, "fanout", After.fanout, integer(1, 1000)),
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
