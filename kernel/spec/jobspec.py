"""Job specs (SPEC §7): check every field a user wrote and return one normalised form.

A spec is the :class:`JobSpec` model (its sections are in :mod:`kernel.spec.sections`,
the built-in payloads in :mod:`kernel.spec.payloads`). The kernel stores ``JobSpec.to_dict()``
as a job's definition and snapshots it into each occurrence; ``JobSpec.digest`` tells an
identical re-apply (a no-op) from a change (a new revision). So whatever means the same
thing normalises to the same value: durations become seconds (float), ``at`` becomes UTC
text, defaults are filled in; fields added later are left out of ``to_dict()`` while
absent or at their default, so existing jobs keep their digest. ``to_dict()`` uses the
spec's own field names, so it is itself a valid spec.

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
from typing import Annotated, Any, Self

from pydantic import Field, ValidationError, model_validator

from kernel.errors import InvalidArgument
from kernel.redaction import holds_credential, is_sensitive_name
from kernel.spec.durations import canonical_json, child_path, parse_duration
from kernel.spec.fields import BOOLEAN, OBJECT, enum_choice, integer, refuse, seconds, text
from kernel.spec.notify import Notify
from kernel.spec.payload_kinds import MAX_PAYLOAD_BYTES, check_payload
from kernel.spec.payloads import SHELL_OUTPUT_LIMIT_DEFAULT
from kernel.spec.problems import Problem, problems_of, raise_problems
from kernel.spec.schedule import ScheduleDict
from kernel.spec.sections import (
    ID,
    After,
    Approval,
    Budget,
    BudgetRef,
    CatchupPolicy,
    DstPolicy,
    History,
    Name,
    OutputPolicy,
    RetryPolicy,
    Section,
)
from kernel.states import Delivery, Overlap

__all__ = [
    "MAX_LOST_LEASES",
    "MAX_PAYLOAD_BYTES",
    "ONE_SHOT",
    "SELF_FENCE_MARGIN_S",
    "SHELL_OUTPUT_LIMIT_DEFAULT",
    "After",
    "Approval",
    "Budget",
    "CatchupPolicy",
    "DstPolicy",
    "History",
    "JobSpec",
    "Notify",
    "OutputPolicy",
    "RetryPolicy",
    "canonical_json",
    "check_limit",
    "parse_duration",
    "read_budget",
    "renew_interval",
    "stored_secrets",
    "validate_job_spec",
]

#: A pool's limit is at most this.
MAX_POOL_LIMIT = 1_000_000
#: A pool name, as a job's ``pool`` field allows it.
_POOL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
#: Seconds between a run's lease renewals never exceed this: pause and cancel requests
#: arrive with the renewal's answer, so a long lease must not mean a long wait for them.
MAX_RENEW_INTERVAL_S = 2.0
#: Schedules that fire once.
ONE_SHOT = frozenset({"at", "in"})
#: Effects are gone this long before the lease can expire (clock rates, scheduling).
SELF_FENCE_MARGIN_S = 1.0
_RENEW_FRACTION = 3
_MAX_QUEUED = 25
#: Leases a run may lose (its worker killed, its host lost) and still be reclaimed.
MAX_LOST_LEASES = 3
_KIND = re.compile(r"[a-z][a-z0-9_.-]{0,63}")


def renew_interval(lease_s: float) -> float:
    """Seconds between a run's lease renewals: a third of the lease, at most 2 s."""
    return min(lease_s / _RENEW_FRACTION, MAX_RENEW_INTERVAL_S)


class JobSpec(Section):
    """A validated, normalised job definition (build it with :func:`validate_job_spec`)."""

    id: Annotated[str, text(128, ID)] = Field(description="The job's id.")
    kind: Annotated[str, text(64, _KIND)] = Field(
        description="Adapter: task, callable, shell, http, watchdog, or one registered by a plugin."
    )
    payload: Annotated[dict[str, Any], OBJECT] = Field(
        description="What the adapter runs; its shape depends on kind."
    )
    schedule: ScheduleDict | None = Field(
        default=None, description="When it fires; null: on demand or chained (after)."
    )
    enabled: Annotated[bool, BOOLEAN] = Field(default=True, description="Whether Beat fires it.")
    queue: Annotated[str, text(64, ID)] = Field(
        default="celery", description="Celery queue of its runs."
    )
    max_attempts: Annotated[int, integer(1, 1000)] = Field(
        default=3, description="Attempts before a run is dead-lettered."
    )
    retry: RetryPolicy = Field(default=RetryPolicy(), description="Backoff between attempts.")
    max_lost_leases: Annotated[int, integer(0, 1000)] = Field(
        default=MAX_LOST_LEASES,
        description="Reclaims of a run whose worker was lost (no attempt spent); one more "
        "lost lease dead-letters it as a poison pill.",
    )
    lease_s: Annotated[float, seconds(5, 86400)] = Field(
        default=60.0, alias="lease", description="How long a worker holds a run between renewals."
    )
    timeout_s: Annotated[float, seconds()] | None = Field(
        default=None, alias="timeout", description="Longest run; null: unbounded."
    )
    expires_s: Annotated[float, seconds()] | None = Field(
        default=None,
        alias="expires",
        description="A firing not started this long after it could is skipped (expired).",
    )
    overlap: Annotated[Overlap, enum_choice(Overlap)] = Field(
        default=Overlap.SKIP,
        description="A firing while a run is unsettled: skip, allow, queue, replace.",
    )
    max_queued: Annotated[int, integer(1, 10000)] = Field(
        default=_MAX_QUEUED, description="Unsettled runs at most."
    )
    catchup: CatchupPolicy = Field(
        default=CatchupPolicy(), description="Firings missed while down."
    )
    delivery: Annotated[Delivery, enum_choice(Delivery)] = Field(
        default=Delivery.AT_LEAST_ONCE, description="at-least-once or at-most-once."
    )
    pool: Name | None = Field(default=None, description="A concurrency pool its runs share.")
    dst: DstPolicy = Field(default=DstPolicy(), description="Cron firings at DST changes.")
    after: After | None = Field(
        default=None, description="Chained: fires when another job settles."
    )
    kill_grace_s: Annotated[float, seconds(0.1, 3600)] = Field(
        default=2.0,
        alias="kill_grace",
        description="From stopping a run's effects to killing them.",
    )
    output: OutputPolicy = Field(
        default=OutputPolicy(), description="Captured output kept per run."
    )
    budget: BudgetRef = Field(
        default=None, description="Runs allowed per window: a budget, or the name of a shared one."
    )
    approval: Approval | None = Field(
        default=None, description="Runs wait for an operator's approval."
    )
    delete_after_run: Annotated[bool, BOOLEAN] = Field(
        default=False, description="A one-shot (at, in) job is deleted once its run finished."
    )
    ttl_s: Annotated[float, seconds()] | None = Field(
        default=None,
        alias="ttl",
        description="A finished one-shot or disabled job is deleted this late.",
    )
    # -- job health (issue 29 items 6-8) --
    history: History | None = Field(
        default=None, description="Settled runs retention keeps per status, the newest."
    )
    notify: Notify | None = Field(
        default=None, description="A task or http endpoint told of failed runs."
    )

    @model_validator(mode="after")
    def _coherent(self) -> Self:
        if self.after is not None and self.after.job == self.id:
            raise refuse("a job cannot be chained after itself", "after.job")
        if self.after is not None and self.id in (self.after.all or ()):
            raise refuse("a job cannot wait for itself", "after.all")
        if self.after is not None and self.schedule is not None:
            raise refuse(
                "a chained job (after) fires when its parent settles; remove its schedule",
                "schedule",
            )
        if self.delete_after_run and not ONE_SHOT & set(self.schedule or ()):
            raise refuse(
                "applies only to a one-shot job (schedule: {at: ...} or {in: ...})",
                "delete_after_run",
            )
        lease, grace = self.lease_s, self.kill_grace_s
        needed = renew_interval(lease) + grace + SELF_FENCE_MARGIN_S
        if lease < needed:
            raise refuse(
                f"{lease:g}s is too short for kill_grace {grace:g}s: a worker renews "
                f"every {renew_interval(lease):.3g}s and must stop a run's effects "
                f"{grace:g}s + {SELF_FENCE_MARGIN_S:g}s before its lease can expire; "
                f"use a lease of at least {needed:.3g}s or a shorter kill_grace",
                "lease",
            )
        return self

    def to_dict(self) -> dict[str, Any]:
        """The normalised spec as JSON-ready data, durations in seconds.

        Every field of the first release is present; later ones only when set.
        """
        spec = {
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
        }
        if self.budget is not None:
            spec["budget"] = self.budget if isinstance(self.budget, str) else self.budget.to_dict()
        if self.approval is not None and self.approval.required:
            spec["approval"] = self.approval.to_dict()
        if self.delete_after_run:
            spec["delete_after_run"] = True
        if self.ttl_s is not None:
            spec["ttl"] = self.ttl_s
        if self.history is not None:
            spec["history"] = self.history.to_dict()
        if self.notify is not None:
            spec["notify"] = self.notify.to_dict()
        if self.expires_s is not None:
            spec["expires"] = self.expires_s
        if self.max_lost_leases != MAX_LOST_LEASES:
            spec["max_lost_leases"] = self.max_lost_leases
        return spec

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Self:
        """Rebuild a spec from :meth:`to_dict` output (a stored snapshot).

        Snapshots stored before a field existed take its default.
        """
        return cls.model_validate(d)

    @property
    def digest(self) -> str:
        """SHA-256 (hex) of the canonical JSON of :meth:`to_dict`; equal meaning, equal digest."""
        return hashlib.sha256(canonical_json(self.to_dict(), "spec").encode()).hexdigest()


def validate_job_spec(raw: Mapping[str, object]) -> JobSpec:
    """Check every field of a job spec (SPEC §7) and return it normalised.

    Only ``id``, ``kind`` and ``payload`` are required; omitted fields take their
    defaults. ``null`` is accepted only where a field is nullable (schedule, timeout,
    pool, after, catchup.window, after.condition, budget, approval, ttl).

    Raises:
        InvalidArgument: ``field`` is the dotted path of the first problem
            (``schedule.timezone``, ``retry.backoff``, ``payload.argv[2]``); the message
            names every problem, ``details["errors"]`` lists them when there are several.
    """
    if not isinstance(raw, Mapping):
        raise InvalidArgument("spec", "must be an object")
    found: list[Problem] = []
    spec: JobSpec | None = None
    try:
        spec = JobSpec.model_validate(dict(raw))
    except ValidationError as exc:
        found = problems_of(exc, JobSpec)
    kind = raw.get("kind")
    payload: dict[str, Any] = {}
    # The payload's own checks need a kind; without one only "payload" itself is judged.
    if isinstance(kind, str) and "payload" in raw and isinstance(raw["payload"], Mapping):
        payload, payload_problems = check_payload(kind, raw["payload"])
        found += [p for p in payload_problems if p not in found]
    if spec is not None:
        found += _without_effect(spec, raw) + stored_secrets(payload)
        if spec.notify is not None and spec.notify.http is not None:
            found += stored_secrets(spec.notify.http, "notify.http")
    raise_problems(found)
    assert spec is not None  # no problem found, so the model validated
    return spec.model_copy(update={"payload": payload})


#: Where a payload holds values by name, and where such a value belongs if it is a secret.
_SECRET_HOMES = {"env": "secrets", "headers": "secret_headers"}


def stored_secrets(payload: Mapping[str, Any], path: str = "payload") -> list[Problem]:
    """Values in a payload's ``env`` or ``headers`` (at any depth: an http ``lookup``, a
    watchdog's check) whose name looks like a credential's, or that hold one (a URL with a
    password): stored, they would sit in clear in the database, its backups and every
    occurrence's snapshot."""
    found: list[Problem] = []
    for key, value in payload.items():
        where = child_path(path, key)
        home = _SECRET_HOMES.get(key)
        if home is not None and isinstance(value, Mapping):
            found += [
                Problem(
                    child_path(where, name),
                    f"looks like a secret ({name}); its value would be stored in clear: "
                    f"name the worker's secret instead, {home}: {{{name}: SECRET_NAME}} "
                    "(see README, Secrets)",
                )
                for name, held in value.items()
                if held
                and (
                    is_sensitive_name(str(name)) or isinstance(held, str) and holds_credential(held)
                )
            ]
        elif isinstance(value, Mapping):
            found += stored_secrets(value, where)
    return found


def _without_effect(spec: JobSpec, raw: Mapping[str, object]) -> list[Problem]:
    """Settings the rest of the spec makes meaningless: refused rather than stored and
    ignored. A value equal to the default that :meth:`JobSpec.to_dict` writes for every
    job is not a setting (an exported spec re-applies); stored specs are not re-judged."""
    found: list[Problem] = []
    if spec.catchup.window_s is not None and spec.catchup.policy != "all":
        found.append(
            Problem(
                "catchup.window",
                f"has no effect under catchup policy {spec.catchup.policy}: only policy all "
                "fires missed firings within a window; remove it or use policy all",
            )
        )
    if spec.overlap is Overlap.REPLACE and raw.get("max_queued", _MAX_QUEUED) != _MAX_QUEUED:
        found.append(
            Problem(
                "max_queued",
                "has no effect under overlap replace: a firing cancels the active run and "
                "nothing queues behind it; remove it or use overlap queue",
            )
        )
    if spec.dst != DstPolicy() and "cron" not in (spec.schedule or {}):
        found.append(
            Problem(
                "dst",
                "applies only to a cron schedule: every, at and in fire at instants, "
                "not wall-clock times; remove it",
            )
        )
    return found


def read_budget(value: object, field: str) -> Budget:
    """A shared budget (a job file's ``budgets.NAME``) checked by the spec's model; a
    :class:`Budget` is already checked (frozen) and passes as it is, so a job file's
    budgets, read by :mod:`beat_schedule.jobfiles`, are validated once."""
    if isinstance(value, Budget):
        return value
    try:
        return Budget.model_validate(value)
    except ValidationError as exc:
        raise_problems(problems_of(exc, Budget, field))
        raise  # raise_problems raised: pydantic found at least one problem


def check_limit(name: object, limit: object) -> None:
    """Refuse a pool name or limit the kernel would not store."""
    if not isinstance(name, str) or not _POOL_NAME.fullmatch(name):
        raise InvalidArgument(
            "pool", f"{name!r} is not a pool name (letters, digits and . _ : -, at most 128)"
        )
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_POOL_LIMIT:
        raise InvalidArgument(
            "limit", f"must be a whole number from 1 to {MAX_POOL_LIMIT}, not {limit!r}"
        )
