"""A job spec's ``schedule`` section: when a job fires (cron, every, at, in), and the
bounds and spread of a recurring schedule: ``start``, ``end``, ``max_runs`` and ``jitter``
beside ``cron`` or ``every`` (``at`` and ``in`` fire once: nothing to bound or spread).

Jitter must be smaller than the shortest gap between two firings: each firing then still
comes due before the next one does, so firings stay in order whatever their offsets.
"""

from __future__ import annotations

from datetime import datetime
from itertools import pairwise
from typing import Annotated, Any, Self

from croniter import CroniterBadDateError, croniter
from pydantic import ConfigDict, Field, GetPydanticSchema, model_validator
from pydantic_core import core_schema

from kernel.spec.fields import CRON, INSTANT, TIME_ZONE, choice, integer, refuse, seconds
from kernel.spec.problems import Shape
from kernel.spec.sections import Section

__all__ = ["MAX_RUNS", "Schedule", "ScheduleDict", "check_bounds", "shortest_gap"]

#: The largest ``max_runs``: counting a job's runs stays cheap (it stops at the bound).
MAX_RUNS = 1_000_000
#: Firings of a cron expression looked at to find its shortest gap: enough to pass
#: every month of a year for an expression that fires daily or more often.
_CRON_SAMPLE = 800
_SAMPLE_FROM = datetime(2001, 1, 1)


def _fires_on_both(expr: str) -> bool:
    """Whether a cron expression (valid for standard cron) has a date matching both its
    day of month and its weekday; croniter looks decades ahead and then gives up."""
    try:
        croniter(expr, datetime(2000, 1, 1), day_or=False).get_next(datetime)
    except CroniterBadDateError:
        return False
    return True


class Schedule(Section):
    """When a job fires: exactly one of ``cron`` (with ``timezone``, ``day_match``),
    ``every``, ``at`` (once) or ``in`` (once, this long after it is defined).

    A key given is checked even when null: ``None`` here means only "not written".
    """

    model_config = ConfigDict(
        json_schema_extra={"oneOf": [{"required": [key]} for key in ("cron", "every", "at", "in")]}
    )

    cron: Annotated[str | None, CRON] = Field(
        default=None, description="A 5-field cron expression."
    )
    timezone: Annotated[str | None, TIME_ZONE] = Field(
        default=None, description="Cron only: the zone the expression is read in (default UTC)."
    )
    day_match: Annotated[str | None, choice("any", "all")] = Field(
        default=None,
        description="Cron only: day of month OR weekday (any, the default) or AND (all).",
    )
    every: Annotated[float | None, seconds(1.0)] = Field(default=None, description="An interval.")
    at: Annotated[str | None, INSTANT] = Field(default=None, description="One instant.")
    in_: Annotated[float | None, seconds()] = Field(
        default=None, alias="in", description="Once, this long after the job is defined."
    )
    # Bounds and spread of a recurring schedule (cron, every): check_bounds.
    start: Annotated[str | None, INSTANT] = Field(
        default=None, description="Recurring only: no firing before this instant."
    )
    end: Annotated[str | None, INSTANT] = Field(
        default=None,
        description="Recurring only: no firing after this instant; the job is then retired.",
    )
    max_runs: Annotated[int | None, integer(1, MAX_RUNS)] = Field(
        default=None,
        description="Recurring only: runs its schedule makes at most; the job is then retired.",
    )
    jitter: Annotated[float | None, seconds()] = Field(
        default=None,
        description="Recurring only: each firing comes due up to this much later, by an "
        "offset derived from the job and the firing (every Beat agrees).",
    )

    @model_validator(mode="after")
    def _one_kind(self) -> Self:
        given = [name for name in ("cron", "every", "at", "in_") if getattr(self, name) is not None]
        if len(given) != 1:
            raise refuse("must hold exactly one of cron, every, at, in")
        for cron_only in ("timezone", "day_match"):
            if given[0] != "cron" and getattr(self, cron_only) is not None:
                raise refuse("applies only to a cron schedule", cron_only)
        check_bounds(self.cron, self.every, self.start, self.end, self.max_runs, self.jitter)
        if self.cron is not None and self.day_match == "all" and not _fires_on_both(self.cron):
            raise refuse(
                f"{self.cron!r} never fires with day_match all: no date has both its day of "
                "month and its weekday; use day_match any or other fields",
                "cron",
            )
        return self

    def to_dict(self) -> dict[str, Any]:
        """The normal form: ``{"cron", "timezone"[, "day_match": "all"]}`` or one key."""
        if self.cron is not None:
            cron: dict[str, Any] = {"cron": self.cron, "timezone": self.timezone or "UTC"}
            # "any" (standard cron) is the default and left out, so that specs written
            # before day_match existed keep their digest.
            if self.day_match == "all":
                cron["day_match"] = "all"
            return {**cron, **self._bounds()}
        return {k: v for k, v in super().to_dict().items() if v is not None}

    def _bounds(self) -> dict[str, Any]:
        # Only those set: specs written before the bounds existed keep their digest.
        given = {"start": self.start, "end": self.end, "max_runs": self.max_runs}
        return {key: value for key, value in {**given, "jitter": self.jitter}.items() if value}


#: A schedule as a job holds it: checked by :class:`Schedule`, kept as its normal dict.
ScheduleDict = Annotated[
    dict[str, Any],
    GetPydanticSchema(
        lambda _source, handler: core_schema.no_info_after_validator_function(
            Schedule.to_dict, handler(Schedule)
        )
    ),
    Shape(Schedule),
]


def shortest_gap(cron: str | None, every: float | None) -> float:
    """Seconds between the two closest firings of ``cron`` (read in UTC, over a sample of
    its firings from 2001) or of ``every``."""
    if every is not None:
        return every
    assert cron is not None
    walk = croniter(cron, _SAMPLE_FROM)
    instants = [walk.get_next(datetime) for _ in range(_CRON_SAMPLE)]
    return min(float((b - a).total_seconds()) for a, b in pairwise(instants))


def check_bounds(
    cron: str | None,
    every: float | None,
    start: str | None,
    end: str | None,
    max_runs: int | None,
    jitter: float | None,
) -> None:
    """Refuse bounds on a one-shot, an end not after the start, and a jitter that could
    reorder firings (not smaller than the shortest gap between two of them)."""
    given = {"start": start, "end": end, "max_runs": max_runs, "jitter": jitter}
    if cron is None and every is None:
        for name, value in given.items():
            if value is not None:
                raise refuse("applies only to a recurring schedule (cron or every)", name)
        return
    if start is not None and end is not None and _instant(end) <= _instant(start):
        raise refuse(f"must be after start ({start})", "end")
    if jitter is not None:
        gap = shortest_gap(cron, every)
        if jitter >= gap:
            raise refuse(
                f"{jitter:g}s is not smaller than the shortest gap between two firings "
                f"({gap:g}s): firings could overtake each other; use a smaller jitter",
                "jitter",
            )


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text)
