"""The bounds and the spread of a recurring schedule: ``start``, ``end``, ``max_runs`` and
``jitter`` beside ``cron`` or ``every`` (``at`` and ``in`` fire once: nothing to bound or
spread).

Jitter must be smaller than the shortest gap between two firings: each firing then still
comes due before the next one does, so firings stay in order whatever their offsets.
"""

from __future__ import annotations

from datetime import datetime
from itertools import pairwise

from croniter import croniter

from kernel.spec.fields import refuse

__all__ = ["MAX_RUNS", "check_bounds", "shortest_gap"]

#: The largest ``max_runs``: counting a job's runs stays cheap (it stops at the bound).
MAX_RUNS = 1_000_000
#: Firings of a cron expression looked at to find its shortest gap: enough to pass
#: every month of a year for an expression that fires daily or more often.
_CRON_SAMPLE = 800
_SAMPLE_FROM = datetime(2001, 1, 1)


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
