"""Celery's ``beat_schedule`` entries become kernel job definitions.

Reading a ``beat_schedule`` gives, per entry, its job spec (or why it is refused),
the options its hints carry, and warnings for what the kernel does not honour.
Beat applies the specs and then tells the kernel which jobs the ``beat_schedule``
now defines, so a removed entry's job is disabled rather than left firing. Each Beat's
schedule is a source of its own (``kernel_beat_source``): a Beat retires only the jobs
its own source defined, never those of a Beat running another schedule on the kernel.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from celery.schedules import crontab, schedule

from beat_schedule.routing import routed_queue
from beat_schedule.task_settings import (
    beat_request,
    expires_field,
    hint_options,
    kernel_priority,
    task_fields,
)
from kernel import InvalidArgument, Job, Kernel, NotFound, validate_job_spec

__all__ = [
    "SOURCE",
    "BeatEntry",
    "BeatZone",
    "beat_zone",
    "BeatSchedule",
    "entry_to_spec",
    "read_beat_schedule",
    "apply_specs",
    "sync_beat_schedule",
    "still_fires",
    "drift",
]

#: The source name of a ``beat_schedule`` that names none (an app without a name).
SOURCE = "beat_schedule"

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


@dataclass(frozen=True)
class BeatZone:
    """The zone Celery reads an app's crontabs in (``app.timezone``), and where it came from.

    Attributes:
        name: an IANA zone name, or None when the host's local zone has none here.
        origin: the setting that decided it, in words.
    """

    name: str | None
    origin: str


def beat_zone(conf: Any) -> BeatZone:
    """Resolve the zone as Celery's ``app.timezone`` does: ``timezone``, else Django's
    ``TIME_ZONE`` (both under the app's namespace, as ``conf.get`` looks them up), else
    UTC, or the host's local zone when ``enable_utc`` is False."""
    for key, origin in (("timezone", "timezone setting"), ("TIME_ZONE", "Django TIME_ZONE")):
        value = conf.get(key)
        if value:
            # A tzinfo as well as a name: zoneinfo's key, pytz's zone.
            name = getattr(value, "key", None) or getattr(value, "zone", None) or str(value)
            return BeatZone(str(name), origin)
    if conf.get("enable_utc", True):
        return BeatZone("UTC", "Celery's default (no timezone set, enable_utc)")
    return BeatZone(_local_zone(), "the host's local zone (no timezone set, enable_utc=False)")


def _local_zone() -> str | None:
    """The IANA name of this host's zone: ``TZ``, else where ``/etc/localtime`` points."""
    candidates = [os.environ.get("TZ", "").lstrip(":")]
    localtime = Path("/etc/localtime")
    if localtime.is_symlink():
        target = str(localtime.resolve())
        candidates.append(target.partition("zoneinfo/")[2])
    for name in candidates:
        try:
            if name:
                ZoneInfo(name)
                return name
        except (ZoneInfoNotFoundError, ValueError):
            continue
    return None


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
    # Celery's Beat binds every entry's crontab to its own app (maybe_schedule), so
    # the zone is the synced app's, whichever app the crontab was made with.
    result: dict[str, Any] = {"cron": " ".join(fields), "timezone": timezone}
    if fields[2] != "*" and fields[4] != "*":
        # Celery fires only on days matching both; standard cron on days matching either.
        result["day_match"] = "all"
    return result


def _schedule(name: str, value: Any, timezone: str | None) -> dict[str, Any]:
    field = f"beat_schedule[{name!r}].schedule"
    if isinstance(value, crontab):
        if timezone is None:
            raise InvalidArgument(
                field,
                "enable_utc is False and no timezone is set, so Celery reads crontabs in "
                "this host's local zone, which has no IANA name here (TZ, /etc/localtime); "
                "set the app's timezone",
            )
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


def entry_to_spec(
    name: str,
    entry: Mapping[str, Any],
    *,
    timezone: str | None = "UTC",
    task: Any = None,
    conf: Any = None,
    app: Any = None,
) -> dict[str, Any]:
    """One ``beat_schedule`` entry as a ``task`` job spec; its ``kernel`` key sets other fields.

    ``app``, the Celery app when known, routes it: its queue is the one Celery's router
    picks (:func:`~beat_schedule.routing.routed_queue`); without it, ``options.queue``.

    ``task``, the registered Celery task when known, contributes its priority, time limits
    and retry settings (see :func:`~beat_schedule.task_settings.task_fields`); ``conf``,
    the app's, tells how its broker orders ``options.priority``
    (:func:`~beat_schedule.task_settings.kernel_priority`).
    """
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
    options = entry.get("options") or {}
    spec["payload"]["request"] = beat_request(options, task)
    if app is not None and "queue" not in (entry.get("kernel") or {}):
        # The queue Celery's Beat would send it to: options, task_routes, task.queue...
        payload = spec["payload"]
        where = f"beat_schedule[{name!r}].options.queue"
        spec["queue"] = routed_queue(
            app, entry["task"], payload["args"], payload["kwargs"], options, where=where
        )
    elif options.get("queue"):
        spec["queue"] = options["queue"]
    if task is not None:
        spec.update(task_fields(name, task)[0])
    spec.update(expires_field(name, options, task))
    limit = options.get("soft_time_limit") or options.get("time_limit")
    if limit:  # the soft limit (else the hard one) is the timeout, as a task's own are
        spec["timeout"] = limit
    if options.get("priority") is not None:
        where = f"beat_schedule[{name!r}].options.priority"
        spec["priority"] = kernel_priority(conf or {}, options["priority"], where)
    spec.update(entry.get("kernel") or {})
    return spec


@dataclass
class BeatEntry:
    """One ``beat_schedule`` entry as the kernel reads it.

    Attributes:
        name: the entry's name in ``beat_schedule``.
        job_id: its job id, or None when the name makes none.
        spec: its job spec, or None when refused.
        refused: why it is refused (the message names the entry), else None.
        hint: the ``send_task`` options its hints carry.
        warnings: what of it the kernel does not honour, each naming the entry.
    """

    name: str
    job_id: str | None
    spec: dict[str, Any] | None = None
    refused: str | None = None
    hint: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


@dataclass
class BeatSchedule:
    """Every entry of one ``beat_schedule``, in its order."""

    entries: list[BeatEntry]
    #: The zone its crontabs are read in.
    zone: BeatZone = field(default_factory=lambda: BeatZone("UTC", "Celery's default"))

    @property
    def specs(self) -> list[dict[str, Any]]:
        return [e.spec for e in self.entries if e.spec is not None]

    @property
    def owned(self) -> dict[str, str]:
        """Job id -> entry name for every entry with a job id, refused ones included:
        a refused entry still exists, so its job is kept as it was, not retired."""
        return {e.job_id: e.name for e in self.entries if e.job_id is not None}

    @property
    def hints(self) -> dict[str, dict[str, Any]]:
        """Job id -> ``send_task`` options, for the entries that set any."""
        return {e.job_id: e.hint for e in self.entries if e.job_id and e.spec and e.hint}


def read_beat_schedule(
    conf: Any, tasks: Mapping[str, Any] | None = None, *, app: Any = None
) -> BeatSchedule:
    """Read ``conf.beat_schedule``; ``tasks`` (``app.tasks``) gives each task's settings;
    ``app`` (the Celery app) routes each entry to its queue as Celery's Beat would.

    Crontabs are read in the app's zone (:func:`beat_zone`), so a change of that zone
    changes their specs: a new revision of each job.
    """
    zone = beat_zone(conf)
    timezone = zone.name
    entries: list[BeatEntry] = []
    by_id: dict[str, BeatEntry] = {}
    for name, raw in (conf.get("beat_schedule") or {}).items():
        entries.append(entry := _read_entry(name, raw, timezone, tasks, conf, app))
        if entry.job_id is None:
            continue
        other = by_id.setdefault(entry.job_id, entry)
        if other is not entry:
            # Both refused: whichever one the kernel kept would depend on dict order.
            message = (
                f"beat_schedule entries {other.name!r} and {name!r} both make job id "
                f"{entry.job_id!r}; rename one of them"
            )
            for clash in (other, entry):
                clash.spec, clash.refused = None, message
    return BeatSchedule(entries, zone)


def _read_entry(
    name: str,
    raw: Mapping[str, Any],
    timezone: str | None,
    tasks: Mapping[str, Any] | None,
    conf: Any,
    app: Any,
) -> BeatEntry:
    try:
        entry = BeatEntry(name, _job_id(name))
    except InvalidArgument as exc:
        return BeatEntry(name, None, refused=str(exc))
    task = None
    if tasks is not None and "task" in raw:
        task = tasks.get(raw["task"])
        if task is None:
            entry.warnings.append(
                f"beat_schedule[{name!r}]: task {raw['task']!r} is not registered here, so "
                "its time limits and retry settings are not read (kernel defaults apply)"
            )
        else:
            entry.warnings += task_fields(name, task)[1]
    try:
        spec = entry_to_spec(name, raw, timezone=timezone, task=task, conf=conf, app=app)
    except InvalidArgument as exc:
        entry.refused = str(exc)
        return entry
    try:
        # What the kernel would refuse when Beat applies it (an interval under 1 s, an
        # argument JSON cannot hold) is refused here, so doctor and status see it too.
        validate_job_spec(spec)
    except InvalidArgument as exc:
        entry.refused = f"{exc.code}: beat_schedule[{name!r}]: {exc.message}"
        return entry
    try:
        entry.hint = hint_options(name, raw.get("options") or {})
    except InvalidArgument as exc:
        entry.refused = f"{exc.code}: {exc.message}"
        return entry
    if raw.get("relative"):
        entry.refused = (
            f"INVALID_ARGUMENT: beat_schedule[{name!r}]: 'relative' is not honoured on the "
            "kernel (its intervals fire at whole multiples of the interval since the Unix "
            "epoch): remove it, or use the entry's kernel `jitter`/`start` instead"
        )
        return entry
    entry.spec = spec
    return entry


def _job(kernel: Kernel, job_id: str | None) -> Job | None:
    try:
        return kernel.get_job(job_id) if job_id is not None else None
    except NotFound:
        return None


def still_fires(entry: BeatEntry, job: Job | None) -> str:
    """For a refused entry: that its job, if enabled, still fires its previous definition
    (a refusal changes nothing stored), and how to stop it; else ``""``."""
    if entry.refused is None or job is None or not job.enabled:
        return ""
    return (
        f"; job {job.id} still fires its previous definition (revision {job.revision}): "
        f"fix the entry, or stop it with `kernel jobs disable {job.id}`"
    )


def drift(entry: BeatEntry, job: Job | None) -> str | None:
    """Why an entry read now differs from its job as the kernel holds it, else None.

    Beat applies such an entry as a new revision at its next start. An entry computed
    at import (a random minute, ``hash()``) differs at every start, and with several
    Beats the last one to start wins; the kernel's ``jitter`` spreads firings without it.
    """
    if entry.spec is None or job is None or validate_job_spec(entry.spec).digest == job.digest:
        return None
    return (
        f"beat_schedule[{entry.name!r}] differs from job {job.id} as the kernel holds it "
        f"(revision {job.revision}); Beat applies it as a new revision at its next start. "
        "If the entry is computed at import (a random minute, hash()), it changes at every "
        "start and, with several Beats, the last one to start wins: give it a fixed schedule "
        "and spread its firings with jitter instead "
        '("kernel": {"schedule": {"cron": "0 * * * *", "jitter": "30m"}})'
    )


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


def sync_beat_schedule(
    kernel: Kernel, schedule: BeatSchedule, *, source: str = SOURCE
) -> dict[str, str]:
    """Apply a read ``beat_schedule`` as the job source ``source`` and retire the jobs of
    that source whose entries were removed.

    Refusals and warnings are logged naming their entry; returns the apply outcome
    by job id (``retired`` / ``restored`` for jobs whose entry left or came back).
    """
    for entry in schedule.entries:
        if entry.refused is not None:
            log.error(
                "beat_schedule entry %r refused: %s%s",
                entry.name,
                entry.refused,
                still_fires(entry, _job(kernel, entry.job_id)),
                extra={"action": "entry_refused", "entry": entry.name},
            )
        for warning in entry.warnings:
            log.warning(warning, extra={"action": "entry_warning", "entry": entry.name})
    outcome = apply_specs(kernel, schedule.specs, source=source)
    changed = kernel.sync_job_source(source, schedule.owned)
    for job_id in changed.retired:
        log.warning(
            "%s: job %s disabled: its entry is no longer in beat_schedule (history kept; "
            "delete it with `kernel jobs delete %s`; if another Beat's schedule defines it, "
            "give each Beat its own kernel_beat_source)",
            source,
            job_id,
            job_id,
            extra={"action": "job_retired", "job_id": job_id, "source": source},
        )
        outcome[job_id] = "retired"
    for job_id in changed.restored:
        log.info(
            "%s: job %s enabled again: its entry is back",
            source,
            job_id,
            extra={"action": "job_restored", "job_id": job_id, "source": source},
        )
        outcome[job_id] = "restored"
    return outcome
