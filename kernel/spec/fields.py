"""Field checks of the job-spec models: one reader of :mod:`kernel.spec.durations` each, with
its JSON Schema.

A field is declared ``Annotated[float, seconds(5, 86400)]``: pydantic calls the reader,
which keeps the kernel's own checks and wording (``0`` and ``1`` are not booleans,
``"90s"`` is a duration, a control character is named by its code point). A refusal
becomes a pydantic error of type :data:`ERROR_TYPE` whose context carries the message
and, for readers that look inside a value (a payload), the path below the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

from kernel.errors import InvalidArgument
from kernel.spec import durations as d

__all__ = [
    "BOOLEAN",
    "CRON",
    "ERROR_TYPE",
    "INSTANT",
    "OBJECT",
    "RATE",
    "TIME_ZONE",
    "Check",
    "choice",
    "enum_choice",
    "integer",
    "real",
    "refuse",
    "seconds",
    "text",
]

#: The pydantic error type of every refusal made by our own checks.
ERROR_TYPE = "spec"
#: Durations as text (``"1h30m"``, or ``"60"`` seconds), in JSON Schema's (ECMA) regex syntax.
DURATION_TEXT = r"^(?:[0-9]{1,12}(?:\.[0-9]{1,9})?|(?:[0-9]{1,12}(?:\.[0-9]{1,9})?[dhms])+)$"


def refuse(message: str, at: str = "") -> PydanticCustomError:
    """A refusal of the value being validated; ``at`` is a path below it (``max``, ``[2]``)."""
    return PydanticCustomError(ERROR_TYPE, "{message}", {"message": message, "at": at})


@dataclass(frozen=True, eq=False)  # hashed by identity: typing hashes Annotated metadata
class Check:
    """``Annotated`` metadata: validate with ``read``, describe with ``schema``."""

    read: d.Reader[Any]
    schema: Mapping[str, Any]

    def _validate(self, value: object) -> Any:
        try:
            return self.read(value, "")
        except InvalidArgument as exc:
            # The reader was given the empty path: its field is the path below this value.
            raise refuse(exc.message.removeprefix(f"{exc.field}: "), exc.field) from None

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return core_schema.no_info_plain_validator_function(self._validate)

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        return dict(self.schema)


def text(max_len: int, pattern: re.Pattern[str] | None = None, *, empty: bool = False) -> Check:
    """A string of at most ``max_len`` characters, no control characters, matching ``pattern``."""
    schema: dict[str, Any] = {"type": "string", "minLength": 0 if empty else 1}
    schema["maxLength"] = max_len
    if pattern is not None:
        schema["pattern"] = f"^(?:{pattern.pattern})$"
    return Check(d.text(max_len, pattern, empty=empty), schema)


def integer(lo: int, hi: int) -> Check:
    """An integer (not a bool) within ``[lo, hi]``."""
    return Check(d.integer(lo, hi), {"type": "integer", "minimum": lo, "maximum": hi})


def real(lo: float, hi: float) -> Check:
    """A number (not a bool) within ``[lo, hi]``, as float."""
    return Check(d.real(lo, hi), {"type": "number", "minimum": lo, "maximum": hi})


def seconds(lo: float = 0.0, hi: float = d.MAX_DURATION_S, *, allow_zero: bool = False) -> Check:
    """A duration in seconds (float), written as a number of seconds or ``"1h30m"``."""
    number: dict[str, Any] = {"type": "number", "maximum": hi}
    if lo > 0 or allow_zero:
        number["minimum"] = lo
    else:
        number["exclusiveMinimum"] = 0
    written = {"type": "string", "pattern": DURATION_TEXT, "examples": ["90s", "15m", "1h30m"]}
    return Check(d.duration(lo, hi, allow_zero=allow_zero), {"anyOf": [number, written]})


def choice(*options: str) -> Check:
    """One of ``options``, exactly as spelt."""
    return Check(d.choice(*options), {"enum": list(options)})


def enum_choice(enum: type[Enum]) -> Check:
    """A member of ``enum``, written as its value."""
    values = [member.value for member in enum]
    read = d.choice(*values)
    return Check(lambda value, field: enum(read(value, field)), {"enum": values})


def _object(value: object, field: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidArgument(field, "must be an object")
    return dict(value)


BOOLEAN = Check(d.boolean, {"type": "boolean"})
CRON = Check(
    d.cron_expression,
    {"type": "string", "description": "5-field cron expression or @daily-style nickname"},
)
TIME_ZONE = Check(d.time_zone, {"type": "string", "description": "IANA zone, e.g. Europe/Berlin"})
INSTANT = Check(
    d.instant,
    {"type": "string", "format": "date-time", "description": "ISO 8601 with a UTC offset"},
)
RATE = Check(
    d.rate,
    {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?(/[smh])?$", "examples": ["30/m", "2/s"]},
)
#: An object whose content another model judges (a payload: :mod:`kernel.spec.payloads`).
OBJECT = Check(_object, {"type": "object"})
