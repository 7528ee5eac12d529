"""The sections of a job spec: retry, catch-up, DST, chain, output, budget, approval, history
(the schedule is :mod:`kernel.spec.schedule`), and a task payload's Celery request.

Each is a frozen model whose attribute ``<name>_s`` is the key ``<name>`` (seconds) as
written; :meth:`Section.to_dict` gives the section as the spec writes it.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    SerializerFunctionWrapHandler,
    Tag,
    ValidationError,
    model_serializer,
    model_validator,
)

from kernel.errors import InvalidArgument
from kernel.spec.fields import (
    BOOLEAN,
    OBJECT,
    choice,
    integer,
    real,
    refuse,
    seconds,
    text,
)
from kernel.spec.problems import problems_of, raise_problems

__all__ = [
    "DEFAULT_FANOUT",
    "DEFAULT_FAN_IN_WITHIN_S",
    "MAX_FAN_IN",
    "ID",
    "After",
    "Approval",
    "Budget",
    "BudgetRef",
    "CatchupPolicy",
    "TaskRequest",
    "DstPolicy",
    "History",
    "Name",
    "OutputPolicy",
    "RetryPolicy",
    "Section",
    "MAX_POOL_LIMIT",
    "check_limit",
    "read_budget",
]

ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")
#: A job id, queue, pool or budget name.
Name = Annotated[str, text(128, ID)]
#: Children a parent fires per settle unless its child's ``after.fanout`` says otherwise.
DEFAULT_FANOUT = 25
#: Parents a fan-in (``after.all``) names at most.
MAX_FAN_IN = 32
#: How long after a logical firing a fan-in waits for all its parents by default.
DEFAULT_FAN_IN_WITHIN_S = 3600.0
_OUTPUT_LIMIT_MAX = 1024 * 1024
_MONTH_S = 31 * 86400.0
_COUNT_MAX = 1_000_000_000


class Section(BaseModel):
    """Base of the spec's models: unknown fields refused, values immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def to_dict(self) -> dict[str, Any]:
        """The section as the spec writes it, durations in seconds."""
        return self.model_dump(by_alias=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        """Inverse of :meth:`to_dict`."""
        return cls.model_validate(d)


class RetryPolicy(Section):
    """Backoff after a retryable failure: ``backoff_s * factor**(n-1)`` capped at ``max_s``,
    spread by ± ``jitter`` (a fraction)."""

    backoff_s: Annotated[float, seconds()] = Field(
        default=30.0, alias="backoff", description="Delay before the first retry."
    )
    factor: Annotated[float, real(1, 100)] = Field(default=2.0, description="Growth per attempt.")
    max_s: Annotated[float, seconds()] = Field(
        default=3600.0, alias="max", description="Longest delay; at least backoff."
    )
    jitter: Annotated[float, real(0, 1)] = Field(
        default=0.1, description="Random spread, a fraction of the delay."
    )

    @model_validator(mode="after")
    def _max_covers_backoff(self) -> Self:
        if self.max_s < self.backoff_s:
            raise refuse("must be at least backoff", "max")
        return self


class CatchupPolicy(Section):
    """Which firings missed while Beat was down still run; ``window_s`` None = unbounded."""

    policy: Annotated[str, choice("latest", "all", "none")] = Field(
        default="latest", description="Which missed firings run: the latest, all, or none."
    )
    window_s: Annotated[float, seconds()] | None = Field(
        default=None,
        alias="window",
        description="Only firings missed this recently (null: any age).",
    )


class DstPolicy(Section):
    """Cron firings in a DST gap (``shift_forward`` | ``skip``) or fold (``first`` |
    ``last`` | ``both``)."""

    gap: Annotated[str, choice("shift_forward", "skip")] = Field(
        default="shift_forward", description="A firing in the hour skipped by DST."
    )
    fold: Annotated[str, choice("first", "last", "both")] = Field(
        default="first", description="A firing in the hour repeated by DST."
    )


class OutputPolicy(Section):
    """A run's captured output (shell stdout/stderr, ``ctx.logger`` lines): at most
    ``limit`` bytes stored per run (the tail), and an ``excerpt`` of at most that many
    bytes (the tail) in error messages and ``occurrences show``."""

    limit: Annotated[int, integer(0, _OUTPUT_LIMIT_MAX)] = Field(
        default=64 * 1024, description="Bytes of output stored per run (the tail)."
    )
    excerpt: Annotated[int, integer(0, 64 * 1024)] = Field(
        default=2048, description="Bytes of output quoted in errors; at most limit."
    )

    @model_validator(mode="after")
    def _excerpt_within_limit(self) -> Self:
        if self.excerpt > self.limit:
            raise refuse("must be at most limit", "excerpt")
        return self


def _condition(value: str) -> str:
    prefix, sep, pattern = value.partition(":")
    if not sep or prefix not in ("contains", "regex") or not pattern:
        raise refuse("must be 'contains:<text>' or 'regex:<pattern>'")
    if prefix == "regex":
        try:
            re.compile(pattern)
        except (re.error, OverflowError, RecursionError) as exc:
            raise refuse(f"regex does not compile: {exc}") from None
    return value


class After(Section):
    """Chain trigger: fire when job ``job`` settles with outcome ``on`` (success, failure,
    complete), ``delay_s`` later, if ``condition`` (``contains:..``/``regex:..``) matches
    the parent's result text; a parent fires at most ``fanout`` children per settle.

    Or fan-in: ``all`` names several parents, and the job fires once for each logical
    firing (the parents' scheduled instant) that every one of them ran successfully,
    all within ``within_s`` of that instant (:mod:`kernel.jobs.fan_in`).
    """

    model_config = ConfigDict(
        json_schema_extra={"oneOf": [{"required": ["job"]}, {"required": ["all"]}]}
    )

    job: Name | None = Field(default=None, description="The parent job's id.")
    on: Annotated[str, choice("success", "failure", "complete")] = Field(
        default="success", description="The parent outcome that fires this job."
    )
    delay_s: Annotated[float, seconds(allow_zero=True)] = Field(
        default=0.0, alias="delay", description="How long after the parent settled."
    )
    condition: Annotated[str, text(1024), AfterValidator(_condition)] | None = Field(
        default=None, description="'contains:<text>' or 'regex:<pattern>' on the parent's result."
    )
    fanout: Annotated[int, integer(1, 1000)] = Field(
        default=DEFAULT_FANOUT, description="Children the parent fires at most per settle."
    )
    # Fan-in (grouped here so the single-parent fields above stay as they were).
    all: Annotated[list[Name], Field(min_length=2, max_length=MAX_FAN_IN)] | None = Field(
        default=None,
        description="Fan-in: the parent jobs that must all succeed for the same logical "
        "firing (their scheduled instant); instead of job.",
    )
    within_s: Annotated[float, seconds(1, _MONTH_S)] | None = Field(
        default=None,
        alias="within",
        description="Fan-in only: how long after the logical firing every parent must "
        "have succeeded (default 1h); later, the firing is skipped (fan_in_timeout).",
    )

    @model_validator(mode="after")
    def _one_parent_form(self) -> Self:
        if self.job is None and self.all is None:
            raise refuse("is required: the parent job (or all: [...] for a fan-in)", "job")
        if self.job is not None and self.all is not None:
            raise refuse("names parents beside job: use job (one parent) or all (fan-in)", "all")
        if self.all is None:
            if self.within_s is not None:
                raise refuse("applies only to a fan-in (all)", "within")
            return self
        if len(set(self.all)) != len(self.all):
            raise refuse("names a job twice", "all")
        single = {"on": "success", "delay_s": 0.0, "condition": None, "fanout": DEFAULT_FANOUT}
        for name, default in single.items():
            if getattr(self, name) != default:
                written = name.removesuffix("_s")
                raise refuse("applies only to a single parent (job), not a fan-in", written)
        return self

    def to_dict(self) -> dict[str, Any]:
        if self.all is not None:
            return {"all": list(self.all), "within": self.within_s or DEFAULT_FAN_IN_WITHIN_S}
        body = super().to_dict()
        del body["all"], body["within"]
        if self.fanout == DEFAULT_FANOUT:  # left out: specs from before fanout keep their digest
            del body["fanout"]
        return body


class Budget(Section):
    """At most ``max_runs`` runs and ``max_units`` units per ``window_s`` seconds."""

    model_config = ConfigDict(
        json_schema_extra={"anyOf": [{"required": ["max_runs"]}, {"required": ["max_units"]}]}
    )

    window_s: Annotated[float, seconds(60, _MONTH_S)] = Field(
        default=86400.0, alias="window", description="The window runs are counted in (60s to 31d)."
    )
    max_runs: Annotated[int, integer(1, _COUNT_MAX)] | None = Field(
        default=None, description="Runs allowed per window."
    )
    max_units: Annotated[int, integer(1, _COUNT_MAX)] | None = Field(
        default=None, description="Units allowed per window."
    )

    @model_validator(mode="after")
    def _bounded(self) -> Self:
        if self.max_runs is None and self.max_units is None:
            raise refuse("must set max_runs or max_units (or both)")
        return self


def _budget_tag(value: Any) -> str | None:
    if value is None:
        return "<none>"
    if isinstance(value, str):
        return "<name>"
    return "<object>" if isinstance(value, dict) else None


_BUDGET_SHAPE = "must be a budget object or the name of a budget in the job file's budgets"
#: A job's budget: its own, the name of a shared one (a job file's ``budgets:``), or none.
BudgetRef = Annotated[
    Annotated[Budget, Tag("<object>")]
    | Annotated[Name, Tag("<name>")]
    | Annotated[None, Tag("<none>")],
    Discriminator(
        _budget_tag,
        custom_error_type="spec",
        custom_error_message=_BUDGET_SHAPE,
        custom_error_context={"message": _BUDGET_SHAPE, "at": ""},
    ),
]


class Approval(Section):
    """Runs wait for an operator's approval, at most ``timeout_s``, then ``auto`` applies."""

    required: Annotated[bool, BOOLEAN] = Field(
        default=True, description="Whether runs wait for approval (false: as if absent)."
    )
    timeout_s: Annotated[float, seconds(1, _MONTH_S)] = Field(
        default=3600.0, alias="timeout", description="How long a run waits for an operator."
    )
    auto: Annotated[str, choice("approve", "reject")] = Field(
        default="reject", description="What happens to a run nobody decided on in time."
    )
    max_pending: Annotated[int, integer(1, 10000)] = Field(
        default=10, description="Runs awaiting approval at once; more are skipped."
    )


# -- job health (issue 29): history limits -------------------------------------------------

#: The most runs of one status a job's ``history`` may keep.
HISTORY_MAX = 100_000


class History(Section):
    """How many settled runs of a job Beat's retention keeps, newest first: at most
    ``succeeded`` successes. ``failed`` is refused: dead letters are unresolved until an
    operator requeues them, and are never pruned (SPEC §6)."""

    succeeded: Annotated[int, integer(1, HISTORY_MAX)] = Field(
        description="Successful runs kept, the newest (at least 1)."
    )
    failed: Annotated[int, integer(1, HISTORY_MAX)] | None = Field(
        default=None,
        description="Refused: dead letters are kept until an operator requeues them.",
    )

    @model_validator(mode="after")
    def _no_failed(self) -> Self:
        if self.failed is not None:
            raise refuse(
                "dead letters are kept until an operator requeues them (unresolved runs "
                "are never pruned); remove history.failed",
                "failed",
            )
        return self

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in super().to_dict().items() if v is not None}


#: A pool's limit is at most this.
MAX_POOL_LIMIT = 1_000_000
#: A pool name, as a job's ``pool`` field allows it.
_POOL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


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


_Limit = Annotated[float, seconds(0.0, allow_zero=True)]
_Repr = Annotated[str, text(8 * 1024, empty=True)]
_Object = Annotated[dict[str, Any], OBJECT]
_TaskId = Annotated[str, text(200)]


class TaskRequest(Section):
    """What a Celery call put in its message for the body's ``self.request``, kept with
    the run so a kernel worker gives the body what Celery's would: custom ``headers``
    (each also ``self.request.<name>``), message ``properties`` (``app_id`` ...), the
    call's ``ignore_result`` over the task's, ``time_limit``/``soft_time_limit`` (the
    run's timeout is its own), ``argsrepr``/``kwargsrepr`` (shown in logs and events
    instead of the arguments), ``stamped_headers`` and ``stamps``; the task ids of its
    ``parent_id``, ``root_id``, ``chain`` steps after it, its group's (``group_id``,
    ``group_index``: kernel/spec/enqueue_request.py). Only given fields are stored."""

    headers: _Object | None = None
    properties: _Object | None = None
    ignore_result: Annotated[bool, BOOLEAN] | None = None
    time_limit: _Limit | None = None
    soft_time_limit: _Limit | None = None
    argsrepr: _Repr | None = None
    kwargsrepr: _Repr | None = None
    stamped_headers: list[Annotated[str, text(256)]] | None = None
    stamps: _Object | None = None
    parent_id: _TaskId | None = None
    root_id: _TaskId | None = None
    chain: list[_TaskId] | None = None
    group_id: _TaskId | None = None
    group_index: Annotated[int, integer(0, _COUNT_MAX)] | None = None

    @model_serializer(mode="wrap")
    def _given(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {name: v for name, v in handler(self).items() if v is not None}
