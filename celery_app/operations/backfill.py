"""Run parameters as given on the command line, and backfills as planned and shown.

A backfill's firings are planned here from the job's current schedule (the same trigger
keys and due times Beat uses, jitter and bounds applied) and made by the kernel in one
transaction that checks the job is still at the revision planned from.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from beat_schedule.timing import firings_between
from celery_app.operations.times import iso, within_calendar
from kernel import InvalidArgument, Kernel, with_params

__all__ = ["MAX_BACKFILL", "backfill", "parse_params"]

#: Firings a backfill makes at most unless ``--max`` says how many (the first N).
MAX_BACKFILL = 10_000


def parse_params(text: str | None) -> dict[str, Any] | None:
    """``--params``: a JSON object, or None when not given.

    Raises:
        InvalidArgument: not JSON, or not an object (``field`` ``params``).
    """
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InvalidArgument("params", f"is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidArgument("params", "must be a JSON object (merged into the payload)")
    return value


def backfill(
    kernel: Kernel,
    job_id: str,
    start: datetime,
    end: datetime,
    *,
    params: dict[str, Any] | None,
    max_firings: int | None,
    dry_run: bool,
    sequential: bool,
    operator: str,
) -> dict[str, Any]:
    """One occurrence per firing of the job's schedule with ``start <= due <= end``.

    Raises:
        InvalidArgument: the job has no schedule (``job``), ``end`` before ``start``
            (``to``), more than :data:`MAX_BACKFILL` firings without ``max_firings``
            (``max``), bad ``params``.
    """
    if end < start:
        raise InvalidArgument("to", f"must not be before --from ({iso(start)})")
    job = kernel.get_job(job_id)
    schedule = job.spec["schedule"]
    if schedule is None:
        raise InvalidArgument(
            "job", f"job {job_id!r} has no schedule: it has no firings to backfill"
        )
    limit = max_firings or MAX_BACKFILL
    with within_calendar("to", f"a firing between {iso(start)} and {iso(end)}"):
        planned = firings_between(
            schedule,
            job.spec["dst"],
            start,
            end,
            anchor=job.defined_at,
            limit=limit + 1,
            job_id=job.id,
        )
    truncated = len(planned) > limit
    if truncated and max_firings is None:
        raise InvalidArgument(
            "max",
            f"the range holds more than {MAX_BACKFILL} firings; narrow it, or pass --max N "
            "to make the first N",
        )
    planned = planned[:limit]
    data: dict[str, Any] = {
        "job_id": job.id,
        "revision": job.revision,
        "from": iso(start),
        "to": iso(end),
        "planned": len(planned),
        "truncated": truncated,
        "sequential": sequential,
        "params": params,
        "dry_run": dry_run,
    }
    if dry_run:
        if params is not None:
            with_params(job.spec, params)  # refused now as the real run would refuse it
        existing = kernel.existing_firings(job.id, [f.trigger_key for f in planned])
        data["firings"] = [
            {
                "trigger_key": f.trigger_key,
                "due": iso(f.at),
                "existing": existing.get(f.trigger_key),
            }
            for f in planned
        ]
        return data
    report = kernel.backfill(
        job.id,
        expected_revision=job.revision,
        firings=[(f.trigger_key, f.at) for f in planned],
        operator=operator,
        params=params,
        sequential=sequential,
        summary={"from": iso(start), "to": iso(end), "planned": len(planned)},
    )
    data["created"] = list(report.created)
    data["skipped"] = [{"trigger_key": key, "reason": why} for key, why in report.skipped]
    data["existing"] = [{"trigger_key": key, "occurrence_id": id_} for key, id_ in report.existing]
    return data
