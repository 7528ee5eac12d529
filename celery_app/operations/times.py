"""Times and JSON as the CLI and the HTTP API show them: UTC, ISO 8601, short human ages,
JSON with those times."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from kernel import InvalidArgument

__all__ = ["utc", "iso", "format_age", "format_json", "within_calendar"]


@contextmanager
def within_calendar(field: str, what: str) -> Iterator[None]:
    """Refuse as INVALID_ARGUMENT on ``field`` a time computed past the calendar's ends
    (Python's dates run from year 1 to 9999; arithmetic beyond raises OverflowError)."""
    try:
        yield
    except OverflowError:
        raise InvalidArgument(field, f"{what} falls outside years 1 to 9999") from None


def utc(moment: datetime) -> datetime:
    """``moment`` in UTC; a naive one is read as UTC.

    Raises:
        InvalidArgument: ``moment`` in UTC falls outside years 1 to 9999.
    """
    if moment.utcoffset() is None:
        return moment.replace(tzinfo=UTC)
    with within_calendar("time", f"{moment.isoformat()} in UTC"):
        return moment.astimezone(UTC)


def iso(value: datetime | None) -> str | None:
    """UTC ISO 8601 with a ``Z``; None stays None."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def format_age(seconds: float | None) -> str:
    """A short human duration: ``0.25s``, ``45s``, ``3m05s``, ``2h10m``, ``4d3h``."""
    if seconds is None:
        return "-"
    if abs(seconds) < 1:
        return f"{seconds:.3f}".rstrip("0").rstrip(".") + "s"
    whole = int(round(seconds))
    sign, whole = ("-", -whole) if whole < 0 else ("", whole)
    if whole < 60:
        return f"{sign}{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{sign}{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{sign}{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{sign}{days}d{hours}h"


def format_json(data: Any, *, indent: int | None = None) -> str:
    """JSON as the CLI prints it: ASCII only, datetimes as UTC ISO."""
    separators = None if indent else (",", ":")
    return json.dumps(data, indent=indent, separators=separators, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
