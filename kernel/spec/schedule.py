"""A job spec's ``schedule`` section: when a job fires (cron, every, at, in), and the
bounds and spread of a recurring schedule (:mod:`kernel.spec.schedule_bounds`)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Self

from croniter import CroniterBadDateError, croniter
from pydantic import ConfigDict, Field, GetPydanticSchema, model_validator
from pydantic_core import core_schema

from kernel.spec.fields import CRON, INSTANT, TIME_ZONE, choice, integer, refuse, seconds
from kernel.spec.problems import Shape
from kernel.spec.schedule_bounds import MAX_RUNS, check_bounds
from kernel.spec.sections import Section

__all__ = ["Schedule", "ScheduleDict"]


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
    # Bounds and spread of a recurring schedule (cron, every): kernel.spec.schedule_bounds.
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
