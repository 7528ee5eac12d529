"""Celery's ``beat_schedule`` entries and job files become kernel job definitions."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from celery.schedules import crontab, schedule

from kernel import InvalidArgument, Kernel

__all__ = ["entry_to_spec", "beat_schedule_specs", "apply_specs"]

log = logging.getLogger("celery_kernel.beat")

_ID_UNSAFE = re.compile(r"[^A-Za-z0-9._:-]+")


def _job_id(name: str) -> str:
    """A Beat entry's name as a job id: unsafe runs become ``-``."""
    job_id = _ID_UNSAFE.sub("-", name).strip("-._:")[:128]
    if not job_id:
        raise InvalidArgument(
            f"beat_schedule[{name!r}]", "the entry name has no usable characters for a job id"
        )
    return job_id


# Each crontab field's full range, in cron's order (minute hour day month weekday).
_CRON_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))


def _cron_field(values: set[int], low: int, high: int) -> str:
    """The numbers one crontab field matches as cron text: ``*``, ``1-5``, ``0-58/2``, ``3,9``.

    Celery has already parsed every syntax it accepts (names like ``monday``,
    ``*/15``, lists, ranges) into these sets, so rewriting the sets rather than the
    text the user wrote keeps exactly its meaning.
    """
    ordered = sorted(values)
    if ordered == list(range(low, high + 1)):
        return "*"
    steps = {b - a for a, b in zip(ordered, ordered[1:], strict=False)}
    if len(ordered) > 2 and len(steps) == 1 and steps != {1}:
        step = steps.pop()
        if ordered[0] == low and ordered[-1] + step > high:
            return f"*/{step}"
        return f"{ordered[0]}-{ordered[-1]}/{step}"
    runs: list[str] = []
    start = prev = ordered[0]
    for value in [*ordered[1:], None]:
        if value is not None and value == prev + 1:
            prev = value
            continue
        runs.append(str(start) if start == prev else f"{start}-{prev}")
        if value is not None:
            start = prev = value
    return ",".join(runs)


def _crontab(value: crontab, timezone: str) -> dict[str, Any]:
    """A Celery crontab as a kernel cron schedule that fires at the same instants."""
    sets = (
        value.minute,
        value.hour,
        value.day_of_month,
        value.month_of_year,
        value.day_of_week,
    )
    fields = [
        _cron_field(set(v), low, high) for v, (low, high) in zip(sets, _CRON_RANGES, strict=True)
    ]
    # Celery's Beat reads a crontab in its app's zone. `crontab.tz` would fall
    # back to whatever app is current, so a crontab without an app takes the
    # zone of the configuration being synced.
    zone = timezone if value._app is None else str(getattr(value._app.timezone, "key", "UTC"))
    result: dict[str, Any] = {"cron": " ".join(fields), "timezone": zone}
    if fields[2] != "*" and fields[4] != "*":
        # Celery fires only on days matching both; standard cron on days matching either.
        result["day_match"] = "all"
    return result


def _schedule(name: str, value: Any, timezone: str) -> dict[str, Any]:
    field = f"beat_schedule[{name!r}].schedule"
    if isinstance(value, crontab):
        return _crontab(value, timezone)
    if isinstance(value, schedule) and type(value) is schedule:
        return {"every": value.run_every.total_seconds()}
    if isinstance(value, timedelta):
        return {"every": value.total_seconds()}
    if isinstance(value, int | float) and not isinstance(value, bool):
        return {"every": float(value)}
    raise InvalidArgument(
        field,
        f"{type(value).__name__} schedules are not supported; use crontab, "
        "timedelta or a number of seconds",
    )


def entry_to_spec(name: str, entry: Mapping[str, Any], *, timezone: str = "UTC") -> dict[str, Any]:
    """One ``beat_schedule`` entry as a ``task`` job spec; its ``kernel`` key sets other fields."""
    if "task" not in entry or "schedule" not in entry:
        raise InvalidArgument(f"beat_schedule[{name!r}]", "needs 'task' and 'schedule'")
    spec: dict[str, Any] = {
        "id": _job_id(name),
        "kind": "task",
        "payload": {
            "task": entry["task"],
            "args": list(entry.get("args") or ()),
            "kwargs": dict(entry.get("kwargs") or {}),
        },
        "schedule": _schedule(name, entry["schedule"], timezone),
    }
    queue = (entry.get("options") or {}).get("queue")
    if queue:
        spec["queue"] = queue
    spec.update(entry.get("kernel") or {})
    return spec


def beat_schedule_specs(conf: Any) -> list[dict[str, Any]]:
    """Every usable entry of ``conf.beat_schedule`` as a job spec; unusable ones are logged."""
    timezone = str(conf.get("timezone") or "UTC")
    specs = []
    for name, entry in (conf.get("beat_schedule") or {}).items():
        try:
            specs.append(entry_to_spec(name, entry, timezone=timezone))
        except InvalidArgument as exc:  # one unusable entry must not keep Beat from starting
            log.error(
                "beat_schedule entry %r skipped: %s",
                name,
                exc,
                extra={"action": "entry_refused", "entry": name},
            )
    return specs


def apply_specs(kernel: Kernel, specs: list[dict[str, Any]], *, source: str) -> dict[str, str]:
    """Apply each spec (create / update with a new revision / leave unchanged).

    A spec the kernel refuses is logged with its field and skipped: one bad
    definition must not keep Beat from scheduling the others.
    """
    outcome: dict[str, str] = {}
    for spec in specs:
        try:
            job, change = kernel.apply_job(spec)
        except InvalidArgument as exc:
            log.error(
                "%s: job %r refused: %s",
                source,
                spec.get("id"),
                exc,
                extra={"action": "job_refused", "job_id": spec.get("id")},
            )
            outcome[str(spec.get("id"))] = f"refused: {exc.code}"
            continue
        outcome[job.id] = change
        if change != "unchanged":
            log.info(
                "%s: job %s %s (revision %s)",
                source,
                job.id,
                change,
                job.revision,
                extra={"action": f"job_{change}", "job_id": job.id},
            )
    return outcome
