"""The parts of an enqueued run's row that are not its request's own fields: its task's
implicit job (one per task and settings, its spec validated once), its callbacks (a
chain's next step first, from its flat ``rest``), the run's definition
(that spec with the run's payload, queue, delivery and timeout spliced in; the payload
with the Celery request fields its call gave, checked here) and its times
(``countdown``/``eta`` as the instant it may start, ``expires`` as its start deadline),
and its trigger key: ``key:<key>`` for a caller's key (a routed call's Celery task id),
``replacing:<nesting>:<replaced occurrence>:<key>`` for a run that took over a replaced
run's task id (Celery's ``self.replace``, kernel/jobs/replacement.py), else
``enqueue:<its millisecond, then random>`` (32 hex digits).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from kernel.errors import InvalidArgument
from kernel.records import dumps, loads
from kernel.spec.durations import canonical_json
from kernel.spec.jobspec import MAX_PAYLOAD_BYTES, MAX_PRIORITY, validate_job_spec
from kernel.spec.problems import problems_of, raise_problems
from kernel.spec.sections import ID, TaskRequest
from kernel.states import Delivery

__all__ = [
    "GENERATED_TRIGGER", "MAX_KEY", "MAX_REQUEST_BYTES", "TASK_JOB_PREFIX", "caller_key",
    "chain_ids", "checked_key", "checked_replaces", "placement", "continued", "continuing",
    "replacement_of", "trigger_key_of", "deadline_ms", "bounded_definition", "delay_ms",
    "keyed_trigger", "link_eta", "retried_definition", "run_deadline", "run_definition",
    "settings_json", "task_job", "task_job_id", "task_job_spec", "task_request",
]  # fmt: skip

TASK_JOB_PREFIX = "task:"
MAX_KEY = 200  # the longest caller's key
#: The most a run's Celery request fields may hold (headers, stamps, reprs), as JSON.
MAX_REQUEST_BYTES = 32 * 1024
_DELIVERIES = frozenset(d.value for d in Delivery)
#: Stand-ins in a definition's template for what each run has of its own.
_OWN = {name: f"\x00{name}" for name in ("payload", "queue", "delivery", "timeout")}
_STAND_INS = {name: dumps(value) for name, value in _OWN.items()}

#: An enqueue with a caller's key (Celery's task id for a routed call) is ``key:<key>``;
#: one without has a new ``enqueue:...``, which no occurrence before it has.
_KEYED, _REPLACING, GENERATED_TRIGGER = "key:", "replacing:", "enqueue:"
#: The longest trigger key (PostgreSQL's column).
_MAX_TRIGGER_KEY = 210


def keyed_trigger(key: str) -> str:
    """The trigger key of an enqueue with the caller's key ``key``."""
    return f"{_KEYED}{key}"


def trigger_key_of(key: str | None, replaces: Mapping[str, Any] | None) -> str:
    """The trigger key of an enqueued run (module docstring); ``replaces``: the replaced
    run it takes over from (:func:`checked_replaces`)."""
    if replaces is None:
        # Else its millisecond then 80 random bits (a UUIDv7's order): the unique indexes
        # append, not a random page each (a WAL full-page image after a checkpoint).
        if key is not None:
            return keyed_trigger(key)
        return f"{GENERATED_TRIGGER}{time.time_ns() // 1_000_000:012x}{os.urandom(10).hex()}"
    trigger_key = f"{_REPLACING}{replaces['nesting']}:{replaces['occurrence']}:{key}"
    if len(trigger_key) > _MAX_TRIGGER_KEY:
        raise InvalidArgument("key", f"{key!r} is too long for a run that replaces another")
    return trigger_key


def caller_key(trigger_key: str) -> str | None:
    """The caller's key of an occurrence enqueued with one (a routed call's Celery task
    id, which a replacement takes over), else None."""
    if trigger_key.startswith(_KEYED):
        return trigger_key.removeprefix(_KEYED)
    if trigger_key.startswith(_REPLACING):
        return trigger_key.split(":", 3)[3]
    return None


def replacement_of(trigger_key: str) -> tuple[int, int] | None:
    """(the replaced occurrence, the nesting: 1 for the first replacement) of a run that
    took over a replaced run's task id, else None."""
    if not trigger_key.startswith(_REPLACING):
        return None
    _, nesting, replaced, _ = trigger_key.split(":", 3)
    return int(replaced), int(nesting)


def checked_replaces(raw: Any, where: str) -> dict[str, Any] | None:
    """A link's ``replaces`` (set by the kernel on the step taking over a replaced run's
    task id): ``occurrence`` and ``nesting`` (positive integers) and the ``chord`` whose
    member it becomes, if any."""
    if raw is None:
        return None
    if (
        not isinstance(raw, Mapping)
        or not set(raw) <= {"occurrence", "nesting", "chord"}
        or any(type(raw.get(n)) is not int or raw[n] < 1 for n in ("occurrence", "nesting"))
        or not isinstance(raw.get("chord", ""), str)
    ):
        raise InvalidArgument(where, "must be an object: occurrence, nesting (and chord)")
    return dict(raw)


def task_job_id(task: str) -> str:
    """The id of ``task``'s implicit job."""
    return f"{TASK_JOB_PREFIX}{task}"


#: The overlap policies a task's calls (its implicit job) honour: ``queue`` makes each
#: run exclusive (one at a time, in order: kernel/spec/enqueue_request.py ``prepare``).
_CALL_OVERLAPS = ("allow", "queue")
#: Job fields a task's calls cannot mean anything by, refused rather than stored and
#: ignored: the job's identity, a schedule's, an operator's switch, gates only firings pass.
_NOT_FOR_CALLS = {
    "id": "a task's calls are runs of its implicit job task:<task name>",
    "kind": "a task's calls run the task (kind task)",
    "payload": "a task's calls carry their own arguments",
    "schedule": "a task's calls run when called; put a schedule on a beat_schedule entry",
    "enabled": "a task's calls wait while an operator disables its job (kernel jobs "
    "disable task:<task name>), a switch no task option turns",
    "catchup": "is a schedule's: a task's calls have no missed firings",
    "dst": "is a cron schedule's: a task's calls have none",
    "after": "a task's calls are made by its callers, not by another job's settle; chain "
    "it with Celery's link or chain",
    "delete_after_run": "is a one-shot job's: a task's calls define its job again",
    "ttl": "would delete a disabled task's job, and its next call would define it enabled "
    "again: a task's calls cannot honour it",
    "budget": "a task's calls are not counted against budgets (a job's firings are); bound "
    "them with max_queued or rate_limit",
    "approval": "a task's calls do not wait for an operator's approval (a job's firings do)",
}


def task_job_spec(task: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The normalised definition of ``task``'s implicit job (do not change it: it is shared).

    Raises:
        InvalidArgument: the name makes no job id, or a setting is invalid.
    """
    return task_job(task, canonical_json(dict(settings), "settings"))[0]


@functools.lru_cache(maxsize=1024)
def task_job(task: str, settings_json: str) -> tuple[dict[str, Any], str]:
    """(spec, template of a run's definition), made once per task and settings: a pydantic
    validation and a whole spec's encoding per call would cost more than the insert.

    The template is the canonical JSON of the spec with stand-ins for what each run has
    of its own (payload, queue, delivery), which :func:`run_definition` splices in."""
    settings = loads(settings_json)
    refused = sorted(_NOT_FOR_CALLS.keys() & settings.keys())
    if refused:
        raise InvalidArgument(f"settings.{refused[0]}", f"{_NOT_FOR_CALLS[refused[0]]}; remove it")
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
    if spec["overlap"] not in _CALL_OVERLAPS:
        raise InvalidArgument(
            "settings.overlap",
            f"{spec['overlap']!r} would drop a call or cancel the one running: a task's calls "
            f"run under {' or '.join(map(repr, _CALL_OVERLAPS))} (one at a time, in order); "
            "put it on a beat_schedule entry's kernel key or a job file instead",
        )
    return spec, dumps({**spec, **_OWN})


def placement(
    spec: Mapping[str, Any], queue: str | None, delivery: str | None, priority: int | None
) -> tuple[str, str, int]:
    """A run's queue, delivery and priority: the call's, else its task job's ``spec``'s.

    Raises:
        InvalidArgument: the call's is invalid (named ``queue``, ``delivery``, ``priority``).
    """
    queue = spec["queue"] if queue is None else queue
    if len(queue) > 64 or not ID.fullmatch(queue):
        raise InvalidArgument("queue", f"{queue!r}: at most 64 of A-Z a-z 0-9 . _ : -")
    delivery = spec["delivery"] if delivery is None else delivery
    if delivery not in _DELIVERIES:
        raise InvalidArgument(
            "delivery", f"must be at-least-once or at-most-once, not {delivery!r}"
        )
    priority = spec.get("priority", 0) if priority is None else priority
    if type(priority) is not int or not 0 <= priority <= MAX_PRIORITY:
        raise InvalidArgument("priority", f"must be an integer from 0 to {MAX_PRIORITY}")
    return queue, delivery, priority


def chain_ids(callbacks: Sequence[Any]) -> list[str]:
    """The task ids of the chain's steps after a run with these ``callbacks`` (link
    signatures, kernel/spec/enqueue_request.py), its request's ``chain``: its callback that
    ``continues`` it (the next step of its chain, Celery's ``request.chain``, not a
    ``link``) and the steps that one carries as its ``rest``, up to the first without a
    task id; a chain ending in a group ends before it, as Celery's names no group member.
    A worker writes a failure under them as Celery's backend does."""
    after = [c for c in callbacks if isinstance(c, Mapping) and c.get("continues")]
    ids: list[str] = []
    for step in [s for sig in after[:1] for s in (sig, *(sig.get("rest") or ()))]:
        task_id = (step.get("options") or {}).get("task_id")
        if not isinstance(task_id, str):
            break
        ids.append(task_id)
    return ids


def task_request(request: Mapping[str, Any] | None) -> str | None:
    """A run's Celery request fields (:class:`~kernel.spec.sections.TaskRequest`) as
    canonical JSON; None when the call gave none.

    Raises:
        InvalidArgument: a field is invalid (named ``request.<field>``).
    """
    if not request:
        return None
    try:
        given = TaskRequest.model_validate(dict(request)).to_dict()
    except ValidationError as exc:
        raise_problems(problems_of(exc, TaskRequest, "request"))
        raise  # raise_problems raised: pydantic reports at least one problem
    text = canonical_json(given, "request") if given else None
    if text is not None and len(text.encode()) > MAX_REQUEST_BYTES:
        raise InvalidArgument(
            "request", f"the request fields exceed {MAX_REQUEST_BYTES} bytes as JSON"
        )
    return text


def settings_json(settings: Mapping[str, Any], encoded: dict[int, str] | None) -> str:
    """``settings`` as canonical JSON; ``encoded``: the texts by settings object, for a
    batch whose runs share one (a task's settings: encoded once a batch, not once a run)."""
    text = None if encoded is None else encoded.get(id(settings))
    if text is None:
        text = canonical_json(dict(settings), "settings")
        if encoded is not None:
            encoded[id(settings)] = text
    return text


def run_definition(
    template: str, task: str, args: str, kwargs: str, request: str | None, queue: str,
    delivery: str, timeout: float | None,
) -> tuple[str, str, str]:  # fmt: skip
    """The run's definition, ``dumps`` of the spec with its payload, queue, delivery and
    timeout, as (head, the run's own ``args``/``kwargs``/``request`` text, tail): head and
    tail are one definition's, queue's, delivery's and timeout's (a batch sends them once)."""
    head, tail = _around_arguments(template, task, queue, delivery, timeout)
    given = "" if request is None else f'"request":{request},'
    return head, f'{args},"kwargs":{kwargs},{given}', tail


@functools.lru_cache(maxsize=1024)
def _around_arguments(
    template: str, task: str, queue: str, delivery: str, timeout: float | None
) -> tuple[str, str]:
    """A definition's text before a run's ``args`` and after its ``kwargs`` (and
    ``request``): the same for every run of one definition, queue, delivery and timeout,
    so a batch's runs encode them once."""
    own = {"queue": dumps(queue), "delivery": dumps(delivery), "timeout": dumps(timeout)}
    for name, value in own.items():
        template = template.replace(_STAND_INS[name], value, 1)
    before, after = template.split(_STAND_INS["payload"], 1)
    return f'{before}{{"args":', f'"task":{dumps(task)}}}{after}'


def bounded_definition(text: str, field: str) -> str:
    """A run's definition ``text``, refused (naming ``field``) when its arguments make it
    larger than a payload may be, plus the room of the spec around them."""
    if len(text.encode()) > MAX_PAYLOAD_BYTES + 4096:
        raise InvalidArgument(
            field, f"the arguments exceed {MAX_PAYLOAD_BYTES} bytes as canonical JSON"
        )
    return text


def retried_definition(definition: str, retry_with: Mapping[str, Any]) -> str:
    """A task run's ``definition`` with the arguments its retry runs with (Celery's
    ``self.retry(args=..., kwargs=...)``), checked and bounded as an enqueue's are.

    Raises:
        InvalidArgument: ``retry_with`` is not ``{"args": [...], "kwargs": {...}}``, the
            run is not a task's, or its arguments are no JSON or too large.
    """
    if (
        not isinstance(retry_with, Mapping)
        or set(retry_with) != {"args", "kwargs"}
        or not isinstance(retry_with["args"], list | tuple)
        or not isinstance(retry_with["kwargs"], Mapping)
    ):
        raise InvalidArgument("retry_with", 'must be {"args": [...], "kwargs": {...}}')
    spec = loads(definition)
    if spec.get("kind") != "task":
        raise InvalidArgument(
            "retry_with", f"only a task's run has arguments; this run is a {spec.get('kind')}'s"
        )
    args = canonical_json(list(retry_with["args"]), "retry_with.args")
    kwargs = canonical_json(dict(retry_with["kwargs"]), "retry_with.kwargs")
    payload = {**spec["payload"], "args": loads(args), "kwargs": loads(kwargs)}
    return bounded_definition(dumps({**spec, "payload": payload}), "retry_with.args")


def delay_ms(countdown: float | None, eta: datetime | None) -> tuple[int, int | None]:
    """When a run may start, as the statement that makes it reads it against its own
    instant (kernel/statements/enqueues.py): (milliseconds after that instant, the
    earliest epoch millisecond or None): ``countdown`` is the first, ``eta`` the second."""
    if countdown is not None and eta is not None:
        raise InvalidArgument("eta", "give countdown or eta, not both")
    if countdown is not None:
        if isinstance(countdown, bool) or not isinstance(countdown, int | float):
            raise InvalidArgument("countdown", "must be a number of seconds")
        if not 0 <= countdown <= 366 * 86400:
            raise InvalidArgument("countdown", "must be from 0 to 366 days in seconds")
        return int(countdown * 1000), None
    if eta is not None:
        if not isinstance(eta, datetime) or eta.tzinfo is None or eta.utcoffset() is None:
            raise InvalidArgument("eta", "must be a datetime with a time zone")
        return 0, int(eta.timestamp() * 1000)
    return 0, None


def link_eta(eta: Any) -> Any:
    """A link's ``eta`` (ISO text: a link is JSON) as the datetime a request takes;
    anything else as it is, for :func:`delay_ms` to refuse."""
    if not isinstance(eta, str):
        return eta
    try:
        return datetime.fromisoformat(eta)
    except ValueError:
        raise InvalidArgument("eta", f"{eta!r} is no ISO 8601 instant") from None


def deadline_ms(expires: float | datetime | None) -> tuple[int | None, int | None]:
    """The start deadline of ``expires`` as Celery reads it, seconds after the call or an
    instant: (milliseconds after the statement's instant, or the epoch millisecond)."""
    if expires is None:
        return None, None
    if isinstance(expires, datetime):
        if expires.tzinfo is None or expires.utcoffset() is None:
            raise InvalidArgument("expires", "must be a datetime with a time zone")
        return None, int(expires.timestamp() * 1000)
    if isinstance(expires, bool) or not isinstance(expires, int | float):
        raise InvalidArgument("expires", "must be a number of seconds or a datetime")
    if not 0 <= expires <= 366 * 86400:
        raise InvalidArgument("expires", "must be from 0 to 366 days in seconds")
    return round(expires * 1000), None


def run_deadline(
    expires: float | datetime | None, spec: Mapping[str, Any], delay: int, not_before: int | None
) -> tuple[int | None, int | None]:
    """A run's start deadline as :func:`deadline_ms` gives it: the call's ``expires``, else
    its job's (``spec``), counted as a firing's is, from when the run may start (``delay``
    ms after the statement's instant, or ``not_before``: its countdown or eta)."""
    if expires is not None or spec.get("expires") is None:
        return deadline_ms(expires)
    after = round(spec["expires"] * 1000)
    return (delay + after, None) if not_before is None else (None, not_before + after)


def continued(sig: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A run's callbacks: its chain's next step first (``rest``), carrying the steps after
    it and continuing the run, then its own."""
    own, rest = list(sig.get("callbacks") or ()), sig.get("rest") or ()
    if not rest:
        return own
    return [{**rest[0], "continues": True, **({"rest": rest[1:]} if rest[1:] else {})}, *own]


def continuing(links_json: str) -> list[bool]:
    """Which of a succeeded run's :func:`link_requests` continue it (``continues``), or
    take a share of its place (``shares``: a group its chain ends with)."""
    return [bool(sig.get("continues") or sig.get("shares"))
            for sig in loads(links_json)["callbacks"] if "chord" not in sig]  # fmt: skip


def checked_key(key: str | None) -> str | None:
    """A caller's idempotency key, checked: 1 to MAX_KEY characters, none a control one."""
    if key is not None:
        if not key or len(key) > MAX_KEY:
            raise InvalidArgument("key", f"must be 1 to {MAX_KEY} characters, not {len(key)}")
        if any(ord(c) < 32 or ord(c) == 127 or 0xD800 <= ord(c) < 0xE000 for c in key):
            raise InvalidArgument("key", "must not contain control characters or surrogates")
    return key
