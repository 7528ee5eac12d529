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


def _cron_field(value: Any) -> str:
    """One crontab field as cron text: ``crontab(hour=(0, 12))`` means ``0,12``."""
    if isinstance(value, str | int):
        return str(value)
    return ",".join(str(v) for v in sorted(value))


def _schedule(name: str, value: Any, timezone: str) -> dict[str, Any]:
    field = f"beat_schedule[{name!r}].schedule"
    if isinstance(value, crontab):
        fields = (
            value._orig_minute,
            value._orig_hour,
            value._orig_day_of_month,
            value._orig_month_of_year,
            value._orig_day_of_week,
        )
        # Celery's Beat reads a crontab in its app's zone. `crontab.tz` would fall
        # back to whatever app is current, so a crontab without an app takes the
        # zone of the configuration being synced.
        zone = timezone if value._app is None else str(getattr(value._app.timezone, "key", "UTC"))
        return {"cron": " ".join(_cron_field(f) for f in fields), "timezone": zone}
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
