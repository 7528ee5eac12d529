"""Times as the CLI and the HTTP API show them: UTC, ISO 8601, short human ages."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["utc", "iso", "format_age"]


def utc(moment: datetime) -> datetime:
    """``moment`` in UTC; a naive one is read as UTC."""
    return moment.replace(tzinfo=UTC) if moment.utcoffset() is None else moment.astimezone(UTC)


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
