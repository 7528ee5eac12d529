"""Enqueue: a task's ad hoc runs as occurrences of its implicit job, idempotent by key.

Every task has an implicit job, ``task:<task name>`` (kind ``task``, no schedule,
overlap ``allow``), defined from the task's own settings the first time this process
enqueues it (and revised when they change, keeping an operator's enable/disable). An
enqueued run is an ordinary occurrence of that job — claim, fence, lease, retries,
dead letter, pause, cancel, ``why`` and events work unchanged — whose snapshot carries
the call's ``args``/``kwargs`` and its queue, delivery and priority.

The rows of one call (or one ``enqueue_many``) are inserted by one statement
(:func:`kernel.statements.enqueue_occurrences`): only for jobs that exist, and
only where the idempotency key is new. A caller's ``key`` gives the trigger key
``key:<key>``, so the same key is the same occurrence for as long as it is retained,
however many callers race for it; without a key each call is a new
``enqueue:<random>`` firing.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from kernel.db.schema import jobs, occurrences
from kernel.errors import InvalidArgument, StateConflict
from kernel.events import EventType
from kernel.jobs import definitions as job_ops
from kernel.limits.held import rate_limit_name
from kernel.records import dumps, loads
from kernel.spec import jobspec
from kernel.spec.durations import MAX_DURATION_S, canonical_json, duration
from kernel.spec.jobspec import MAX_LOST_LEASES, MAX_PAYLOAD_BYTES, validate_job_spec
from kernel.spec.sections import ID
from kernel.statements import MAX_ROWS, enqueue_occurrences, enqueue_params
from kernel.states import Delivery
from kernel.transaction.tx import Tx
from kernel.transitions import occurrences as T

__all__ = [
    "MAX_KEY",
    "TASK_JOB_PREFIX",
    "EnqueueRequest",
    "Enqueued",
    "enqueue",
    "task_job_id",
    "task_job_spec",
]

#: The longest caller's key.
MAX_KEY = 200
TASK_JOB_PREFIX = "task:"
#: Stand-ins in a definition's template for what each run has of its own.
_OWN = {name: f"\x00{name}" for name in ("payload", "queue", "delivery", "timeout")}
_STAND_INS = {name: dumps(value) for name, value in _OWN.items()}
#: A run's own timeout is read as a job's is.
_RUN_TIMEOUT = duration(0.0, MAX_DURATION_S)


@dataclass(frozen=True, slots=True)
class EnqueueRequest:
    """One ad hoc run of ``task``.

    Attributes:
        task: the task's registered name.
        args, kwargs: its arguments (JSON).
        key: idempotency key (<= 200 characters): the same key of the same task is the
            same occurrence.
        queue, delivery: this run's, else its job's.
        countdown: seconds from now before it may be claimed; ``eta``: the instant
            (timezone-aware). At most one of them.
        priority: 0-255; among claimable occurrences higher ones are hinted first.
        settings: job spec fields from the task's own options (timeout, max_attempts,
            retry, queue, ...), which define its implicit job.
        timeout: this run's longest run in seconds (a call's ``time_limit``), else its
            job's: its definition's, which the worker's time limits enforce.
    """

    task: str
    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] | None = None
    key: str | None = None
    queue: str | None = None
    delivery: str | None = None
    countdown: float | None = None
    eta: datetime | None = None
    priority: int | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    timeout: float | None = None


@dataclass(frozen=True, slots=True)
class Enqueued:
    """What an enqueue made or found.

    Attributes:
        occurrence_id: the occurrence.
        deduplicated: its key existed: this is the occurrence an earlier call made.
        job_id: ``task:<task name>``.
        queue: the queue its hint goes to.
        claimable: whether it may be claimed now (no countdown/eta in the future).
        timeout: its job's timeout in seconds (the hint's time limit), or None.
        priority: its priority (0-255), which its hint carries.
    """

    occurrence_id: int
    deduplicated: bool
    job_id: str
    queue: str
    claimable: bool
    timeout: float | None = None
    priority: int = 0


def task_job_id(task: str) -> str:
    """The id of ``task``'s implicit job."""
    return f"{TASK_JOB_PREFIX}{task}"


def task_job_spec(task: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The normalised definition of ``task``'s implicit job (do not change it: it is shared).

    Raises:
        InvalidArgument: the name makes no job id, or a setting is invalid.
    """
    return _task_job(task, canonical_json(dict(settings), "settings"))[0]


@functools.lru_cache(maxsize=1024)
def _task_job(task: str, settings_json: str) -> tuple[dict[str, Any], str]:
    """(spec, template of a run's definition), made once per task and settings: a pydantic
    validation and a whole spec's encoding per call would cost more than the insert.

    The template is the canonical JSON of the spec with stand-ins for what each run has
    of its own (payload, queue, delivery, timeout), which :func:`_definition` splices in."""
    settings = loads(settings_json)
    job_id = task_job_id(task)
    if len(job_id) > 128 or not ID.fullmatch(job_id):
        raise InvalidArgument(
            "task", f"{task!r} makes no job id {job_id!r} (at most 128 of A-Z a-z 0-9 . _ : -)"
        )
    raw = {
        "overlap": "allow",
        **settings,
        "id": job_id,
        "kind": "task",
        "payload": {"task": task, "args": [], "kwargs": {}},
        "schedule": None,
    }
    spec = validate_job_spec(raw).to_dict()
    return spec, dumps({**spec, **_OWN})


@dataclass(frozen=True, slots=True)
class _Row:
    """One request as the statement's values, and what its answer needs."""

    values: dict[str, Any]
    job_id: str
    claimable: bool
    timeout: float | None

    @property
    def key(self) -> str:
        """Its idempotency key (unique among occurrences)."""
        return str(self.values["idempotency_key"])


def _definition(
    template: str,
    task: str,
    args: str,
    kwargs: str,
    queue: str,
    delivery: str,
    timeout: float | None,
) -> str:
    """The run's definition as canonical JSON: the text ``dumps`` of the spec with this
    run's payload, queue, delivery and timeout gives (canonical ``args``/``kwargs``
    spliced in)."""
    own = {
        "payload": f'{{"args":{args},"kwargs":{kwargs},"task":{dumps(task)}}}',
        "queue": dumps(queue),
        "delivery": dumps(delivery),
        "timeout": dumps(timeout),
    }
    for name, value in own.items():
        template = template.replace(_STAND_INS[name], value, 1)
    return template


def _prepare(
    request: EnqueueRequest, specs: dict[str, dict[str, Any]], now: int, hinted: bool
) -> _Row:
    """Check one request and make its row (InvalidArgument names the field); ``specs``
    collects its implicit job's spec."""
    if not isinstance(request.task, str) or not request.task:
        raise InvalidArgument("task", "must be a task's name")
    job_id = task_job_id(request.task)
    spec, template = _task_job(request.task, canonical_json(dict(request.settings), "settings"))
    spec = specs.setdefault(job_id, spec)
    args = canonical_json(list(request.args), "args")
    kwargs = canonical_json(dict(request.kwargs or {}), "kwargs")
    key = request.key
    if key is not None:
        if not key or len(key) > MAX_KEY:
            raise InvalidArgument("key", f"must be 1 to {MAX_KEY} characters, not {len(key)}")
        if any(ord(c) < 32 or ord(c) == 127 or 0xD800 <= ord(c) < 0xE000 for c in key):
            raise InvalidArgument("key", "must not contain control characters or surrogates")
    queue = spec["queue"] if request.queue is None else request.queue
    if len(queue) > 64 or not ID.fullmatch(queue):
        raise InvalidArgument("queue", f"{queue!r}: at most 64 of A-Z a-z 0-9 . _ : -")
    delivery = spec["delivery"] if request.delivery is None else request.delivery
    if delivery not in {d.value for d in Delivery}:
        raise InvalidArgument(
            "delivery", f"must be at-least-once or at-most-once, not {delivery!r}"
        )
    priority = spec.get("priority", 0) if request.priority is None else request.priority
    if type(priority) is not int or not 0 <= priority <= jobspec.MAX_PRIORITY:
        raise InvalidArgument("priority", f"must be an integer from 0 to {jobspec.MAX_PRIORITY}")
    available_at = now + _delay_ms(request.countdown, request.eta, now)
    timeout = (
        spec["timeout"] if request.timeout is None else _RUN_TIMEOUT(request.timeout, "timeout")
    )
    text = _definition(template, request.task, args, kwargs, queue, delivery, timeout)
    if len(text.encode()) > MAX_PAYLOAD_BYTES + 4096:  # the payload's limit, plus the spec
        raise InvalidArgument(
            "args", f"the arguments exceed {MAX_PAYLOAD_BYTES} bytes as canonical JSON"
        )
    trigger_key = f"key:{key}" if key is not None else f"enqueue:{uuid.uuid4().hex}"
    claimable = available_at <= now
    return _Row(
        values={
            "job_id": spec["id"],
            "trigger_key": trigger_key,
            "idempotency_key": f"{spec['id']}|{trigger_key}",
            "scheduled_for": available_at,
            "max_attempts": spec["max_attempts"],
            "max_lost_leases": spec.get("max_lost_leases", MAX_LOST_LEASES),
            "available_at": available_at,
            # A caller who publishes the hint at once: the pump waits kernel_rehint_after.
            "dispatched_at": now if hinted and claimable else None,
            "queue": queue,
            "delivery": delivery,
            "pool": spec["pool"],
            "definition": text,
            "created_at": now,
            "priority": priority,
            "rate_limit": rate_limit_name(spec),
        },
        job_id=spec["id"],
        claimable=claimable,
        timeout=timeout,
    )


def _delay_ms(countdown: float | None, eta: datetime | None, now: int) -> int:
    if countdown is not None and eta is not None:
        raise InvalidArgument("eta", "give countdown or eta, not both")
    if countdown is not None:
        if isinstance(countdown, bool) or not isinstance(countdown, int | float):
            raise InvalidArgument("countdown", "must be a number of seconds")
        if not 0 <= countdown <= 366 * 86400:
            raise InvalidArgument("countdown", "must be from 0 to 366 days in seconds")
        return int(countdown * 1000)
    if eta is not None:
        if not isinstance(eta, datetime) or eta.tzinfo is None or eta.utcoffset() is None:
            raise InvalidArgument("eta", "must be a datetime with a time zone")
        return max(0, int(eta.timestamp() * 1000) - now)
    return 0


def _ensure_job(tx: Tx, spec: Mapping[str, Any]) -> None:
    """Define the implicit job, or revise it to ``spec``, keeping its enabled state."""
    current = tx.conn.execute(
        sa.select(jobs.c.revision, jobs.c.enabled, jobs.c.spec).where(jobs.c.id == spec["id"])
    ).first()
    if current is None:
        try:
            job_ops.define_job(tx, spec)
        except StateConflict:  # defined meanwhile with other settings: revise below
            _ensure_job(tx, spec)
        return
    if loads(current.spec)["kind"] != "task":
        raise InvalidArgument(
            "task", f"job {spec['id']!r} exists and is not a task's implicit job; rename one"
        )
    job_ops.revise_job(tx, {**spec, "enabled": current.enabled}, current.revision)


def _insert(tx: Tx, rows: Sequence[_Row]) -> dict[str, tuple[int, int]]:
    """Insert ``rows`` where their job exists and their key is new.

    Returns:
        idempotency key -> (occurrence id, job revision) of each row inserted.
    """
    made: dict[str, tuple[int, int]] = {}
    step = MAX_ROWS[tx.dialect]
    for start in range(0, len(rows), step):
        chunk = [row.values for row in rows[start : start + step]]
        statement = enqueue_occurrences(tx.dialect, len(chunk))
        for r in tx.conn.execute(statement, enqueue_params(tx.dialect, chunk)):
            made[r.idempotency_key] = (r.id, r.job_revision)
    return made


def _existing(tx: Tx, keys: Sequence[str]) -> dict[str, int]:
    if not keys:
        return {}
    rows = tx.conn.execute(
        sa.select(occurrences.c.idempotency_key, occurrences.c.id).where(
            occurrences.c.idempotency_key.in_(keys)
        )
    )
    return {r.idempotency_key: r.id for r in rows}


def enqueue(
    tx: Tx,
    requests: Sequence[EnqueueRequest],
    *,
    defined: dict[str, dict[str, Any]],
    hinted: bool = False,
) -> list[Enqueued]:
    """Make (or find, by key) one occurrence per request, in this transaction.

    ``defined``: job id -> the spec this process last ensured, so a task's job is
    defined once per process (and again when its settings change or it was deleted).
    ``hinted``: the caller publishes the claimable ones' hints itself, at once.

    Raises:
        InvalidArgument: a request is invalid (``field`` names it, ``requests[i].`` first
            in a batch); nothing is written.
    """
    specs: dict[str, dict[str, Any]] = {}
    rows: list[_Row] = []
    for index, request in enumerate(requests):
        try:
            rows.append(_prepare(request, specs, tx.now, hinted))
        except InvalidArgument as exc:
            if len(requests) == 1:
                raise
            why = exc.message.removeprefix(f"{exc.field}: ")
            raise InvalidArgument(f"requests[{index}].{exc.field}", why) from None
    for job_id, spec in specs.items():
        if defined.get(job_id) is not spec:  # the cached spec: the same settings
            _ensure_job(tx, spec)
    tx.allowed_events.update(T.TASK_ENQUEUED.events)  # its statement, per batch size: _insert
    made = _insert(tx, rows)
    found = _existing(tx, [row.key for row in rows if row.key not in made])
    orphans = [row for row in rows if row.key not in made and row.key not in found]
    if orphans:  # their job was deleted since this process defined it: define it again
        for job_id in {row.job_id for row in orphans}:
            _ensure_job(tx, specs[job_id])
        made.update(_insert(tx, orphans))
    for job_id, spec in specs.items():
        defined[job_id] = spec
    answers: list[Enqueued] = []
    events: list[dict[str, Any]] = []
    seen: set[str] = set()
    for row in rows:
        created = row.key in made and row.key not in seen  # a key twice: the first made it
        seen.add(row.key)
        occurrence_id = made[row.key][0] if row.key in made else found[row.key]
        answers.append(
            Enqueued(
                occurrence_id,
                not created,
                row.job_id,
                row.values["queue"],
                row.claimable and created,
                row.timeout,
                row.values["priority"],
            )
        )
        if created:
            events.append(_event(row, *made[row.key]))
    tx.emit_rows(EventType.OCCURRENCE_CREATED, events)
    return answers


def _event(row: _Row, occurrence_id: int, revision: int) -> dict[str, Any]:
    values = row.values
    data: dict[str, Any] = {
        "trigger_key": values["trigger_key"],
        "revision": revision,
        "scheduled_for": values["scheduled_for"],
        "enqueued": True,
    }
    if values["priority"]:
        data["priority"] = values["priority"]
    return {"job_id": row.job_id, "occurrence_id": occurrence_id, "data": data}
