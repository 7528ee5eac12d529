"""An enqueue request checked and made an occurrence's row, and the links it carries.

The rows are built here, below the statements, for an enqueue (kernel/jobs/enqueueing.py) and
the settle that fires a run's links (kernel/occurrences/chains.py).

A link is a plain JSON signature (the kernel never imports Celery)::

    {"task": name, "args": [...], "kwargs": {...}, "immutable": false,
     "options": {"task_id": ..., "queue": ..., "countdown": ..., "eta": ISO text with
                 a zone, "priority": ...},
     "settings": {job fields of the task's implicit job},
     "callbacks": [signature, ...], "errbacks": [signature, ...], "rest": [signature, ...]}

A callback may carry ``"chord": {"id": <Celery's group id>, "header": [signature, ...]}``: a chord
as a chain's step. Its firing makes the header's runs, the chord's members (the result first unless
immutable), and the chord's row, whose body is the signature itself (without ``chord``): the last
member's settle makes it, the rest of the chain after it. The chord may carry ``"then": {"id",
"header"}``, a chord whose body is a chord (Celery's ``group | group | task``): the first chord's
body is then the signature with that chord, made as a chord step by the settle that completes the
first; ``"group": [signature, ...]``, a group body's other members (the signature is its first).
A header member may be a chord step too (a chord as a chord's member): its body's end takes that
member's place.

``callbacks`` (Celery's ``link``) become occurrences when the run succeeds, the result prepended
to their arguments unless immutable; ``errbacks`` (``link_error``) when it is dead-lettered, the
failed run's task id prepended unless immutable. A signature's ``request`` (its run's Celery request
fields) lets the worker call it as it must (celery_app/errbacks.py). Each is keyed by its
``options.task_id`` (Celery's id of that step), else by its parent and place, so it is created
once. ``rest``: a chain's steps after this one, flat; its run's first callback is the next step,
carrying the others, which ``continues`` it: it takes the run's place in its chord, if any (the
chain's end counts the chord down; ``shares``: each member of a group the chain ends with takes a
share of it), and the steps' ids are its request's ``chain`` (:func:`chain_ids`). A link's run names
its parent's task id (``parent_id``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kernel.errors import InvalidArgument
from kernel.spec.durations import MAX_DURATION_S, canonical_json, duration, rate_limit_name
from kernel.spec.jobspec import MAX_LOST_LEASES, MAX_PAYLOAD_BYTES
from kernel.spec.task_runs import (
    MAX_KEY,
    TASK_JOB_PREFIX,
    bounded_definition,
    chain_ids,
    checked_key,
    checked_replaces,
    continued,
    continuing,
    delay_ms,
    link_eta,
    placement,
    run_deadline,
    run_definition,
    settings_json,
    task_job,
    task_job_id,
    task_job_spec,
    task_request,
    trigger_key_of,
)

__all__ = [
    "MAX_KEY", "TASK_JOB_PREFIX", "EnqueueRequest", "EnqueueRow", "checked_links", "continuing",
    "prepare", "signature_request", "task_job_id", "task_job_spec"]  # fmt: skip

_RUN_TIMEOUT = duration(0.0, MAX_DURATION_S)  # a run's own timeout, read as a job's is
_SIGNATURE_FIELDS = frozenset(
    {"task", "args", "kwargs", "immutable", "options", "settings", "callbacks", "errbacks",
     "chord", "replaces", "request", "continues", "shares", "rest"}
)  # fmt: skip
_SIGNATURE_OPTIONS = frozenset({"task_id", "queue", "countdown", "eta", "priority"})


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
        expires: a start deadline, seconds from now or an aware datetime (Celery's
            ``expires``): not started by then, the run is skipped ``expired``.
        timeout: this run's longest run in seconds (a call's ``time_limit``), else its
            job's: its definition's, which the worker's time limits enforce.
        settings: job spec fields from the task's own options (timeout, max_attempts,
            retry, queue, ...), which define its implicit job.
        callbacks: signatures made occurrences when it succeeds (module docstring).
        errbacks: signatures made occurrences when it is dead-lettered.
        request: the Celery request fields its call gave (``TaskRequest``), for its body.
        replaces: the replaced run whose task id (``key``) it takes over
            (:func:`~kernel.spec.task_runs.checked_replaces`).
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
    callbacks: Sequence[Mapping[str, Any]] = ()
    errbacks: Sequence[Mapping[str, Any]] = ()
    expires: float | datetime | None = None
    timeout: float | None = None
    request: Mapping[str, Any] | None = None
    replaces: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class EnqueueRow:
    """One request as the statement's values, and what its answer needs; ``links``: the
    signatures' implicit jobs (task name -> settings), which must exist before they fire.

    Its times are relative to the instant the statement reads (kernel/statements/enqueues.py):
    ``delay_ms`` after it, not before ``not_before``; ``expires_at`` or ``expires_after``."""

    values: dict[str, Any]
    job_id: str
    timeout: float | None
    links: dict[str, Mapping[str, Any]]
    #: Its idempotency key (unique among occurrences): ``values["idempotency_key"]``.
    key: str


def prepare(
    request: EnqueueRequest, specs: dict[str, dict[str, Any]], hinted: bool,
    parent_id: int | None = None, encoded: dict[int, str] | None = None,
) -> EnqueueRow:  # fmt: skip
    """Check one request and make its row (InvalidArgument names the field); ``specs``
    collects its implicit job's spec. ``parent_id``: the run whose link it is;
    ``encoded``: :func:`~kernel.spec.task_runs.settings_json`'s."""
    if not isinstance(request.task, str) or not request.task:
        raise InvalidArgument("task", "must be a task's name")
    job_id = task_job_id(request.task)
    spec, template = task_job(request.task, settings_json(request.settings, encoded))
    spec = specs.setdefault(job_id, spec)
    args = canonical_json(list(request.args), "args")
    kwargs = canonical_json(dict(request.kwargs), "kwargs") if request.kwargs else "{}"
    key = checked_key(request.key)
    queue, delivery, priority = placement(spec, request.queue, request.delivery, request.priority)
    delay, not_before = delay_ms(request.countdown, request.eta)
    expires_after, expires_at = run_deadline(request.expires, spec, delay, not_before)
    timeout = (
        spec["timeout"] if request.timeout is None else _RUN_TIMEOUT(request.timeout, "timeout")
    )
    chain = chain_ids(request.callbacks)
    given = task_request({**(request.request or {}), "chain": chain} if chain else request.request)
    parts = run_definition(template, request.task, args, kwargs, given, queue, delivery, timeout)
    text = bounded_definition("".join(parts), "args")
    chord = (request.replaces or {}).get("chord")  # a chord member's place, taken over
    links, jobs_of_links = checked_links(request.callbacks, request.errbacks, chord)
    trigger_key = trigger_key_of(key, request.replaces)
    idempotency_key = f"{spec['id']}|{trigger_key}"
    return EnqueueRow(
        values={
            "job_id": spec["id"],
            "trigger_key": trigger_key,
            "idempotency_key": idempotency_key,
            "max_attempts": spec["max_attempts"],
            "max_lost_leases": spec.get("max_lost_leases", MAX_LOST_LEASES),
            "delay_ms": delay,
            "not_before": not_before,
            # A caller who publishes the hint at once (one held back: delivered when it
            # may start): the pump waits kernel_rehint_after past that time.
            "hinted": hinted,
            "queue": queue,
            "delivery": delivery,
            "pool": spec["pool"],
            "exclusive": spec["overlap"] == "queue",
            "definition": text,
            # The same text as (head, own, tail): a batch sends each head and tail once.
            "definition_parts": parts,
            "priority": priority,
            "expires_at": expires_at,
            "expires_after": expires_after,
            "rate_limit": rate_limit_name(spec),
            "links": links,
            "parent_id": parent_id,
        },
        job_id=spec["id"],
        timeout=timeout,
        links=jobs_of_links,
        key=idempotency_key,
    )


def checked_links(
    callbacks: Sequence[Mapping[str, Any]],
    errbacks: Sequence[Mapping[str, Any]],
    chord: str | None = None,
) -> tuple[str | None, dict[str, Mapping[str, Any]]]:
    """The ``links`` column (canonical JSON, or None without links), naming ``chord``
    when the run is its member, and every task a signature names, at any depth, with
    its settings."""
    tasks: dict[str, Mapping[str, Any]] = {}
    if not callbacks and not errbacks and chord is None:  # most runs: no text, no walk
        return None, tasks
    checked: dict[str, Any] = {
        "callbacks": [_signature(s, f"callbacks[{i}]", tasks) for i, s in enumerate(callbacks)],
        "errbacks": [_signature(s, f"errbacks[{i}]", tasks) for i, s in enumerate(errbacks)],
        **({"chord": chord} if chord is not None else {}),
    }
    text = canonical_json(checked, "links")
    if len(text.encode()) > MAX_PAYLOAD_BYTES:
        raise InvalidArgument("links", f"the links exceed {MAX_PAYLOAD_BYTES} bytes as JSON")
    return text, tasks


def _signature(
    raw: Mapping[str, Any], path: str, tasks: dict[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """One signature checked and normalised; InvalidArgument names its path and field."""
    if not isinstance(raw, Mapping):
        raise InvalidArgument(path, "a link must be a signature (a JSON object)")
    unknown = sorted(set(raw) - _SIGNATURE_FIELDS)
    if unknown:
        raise InvalidArgument(f"{path}.{unknown[0]}", "is not a field of a kernel link")
    options = dict(raw.get("options") or {})
    refused = sorted(name for name, v in options.items() if v is not None
                     and name not in _SIGNATURE_OPTIONS)  # fmt: skip
    if refused:
        raise InvalidArgument(
            f"{path}.options.{refused[0]}",
            f"a kernel link honours the options {', '.join(sorted(_SIGNATURE_OPTIONS))}",
        )
    task = raw.get("task")
    if not isinstance(task, str) or not task:
        raise InvalidArgument(f"{path}.task", "must be a task's name")
    settings = raw.get("settings") or {}
    if (
        not isinstance(raw.get("args") or [], list | tuple)
        or not isinstance(raw.get("kwargs") or {}, Mapping)
        or not isinstance(settings, Mapping)
    ):
        raise InvalidArgument(path, "args must be a list, kwargs and settings objects")
    settings = dict(settings)
    try:
        own = {name: raw.get(name) for name in ("args", "kwargs", "request")}  # links: below
        prepare(signature_request(task, own, options, settings, (), None), {}, False)
    except InvalidArgument as exc:
        why = exc.message.removeprefix(f"{exc.field}: ")
        raise InvalidArgument(f"{path}.{exc.field}", why) from None
    tasks.setdefault(task, settings)
    # A chain's steps after this one, flat: its depth does not grow with its length.
    rest = [_signature(s, f"{path}.rest[{i}]", tasks) for i, s in enumerate(raw.get("rest") or ())]
    if any("rest" in step for step in rest):
        raise InvalidArgument(f"{path}.rest", "a step of a chain's rest has no rest of its own")
    chord = raw.get("chord")
    if chord is not None and (".errbacks[" in path or path.startswith("errbacks[")):
        raise InvalidArgument(f"{path}.chord", "a chord is a callback, not an errback")
    chord = None if chord is None else _chord_fields(chord, f"{path}.chord", tasks)
    replaces = checked_replaces(raw.get("replaces"), f"{path}.replaces")
    return {
        **({"chord": chord} if chord is not None else {}),
        **({"replaces": replaces} if replaces is not None else {}),
        **({"request": dict(raw["request"])} if raw.get("request") else {}),
        **({"continues": True} if raw.get("continues") else {}),
        **({"shares": True} if raw.get("shares") else {}),
        **({"rest": rest} if rest else {}),
        "task": task,
        "args": list(raw.get("args") or ()),
        "kwargs": dict(raw.get("kwargs") or {}),
        "immutable": bool(raw.get("immutable", False)),
        "options": {name: v for name, v in options.items() if v is not None},
        "settings": settings,
        "callbacks": [_signature(s, f"{path}.callbacks[{i}]", tasks)
                      for i, s in enumerate(raw.get("callbacks") or ())],
        "errbacks": [_signature(s, f"{path}.errbacks[{i}]", tasks)
                     for i, s in enumerate(raw.get("errbacks") or ())],
    }  # fmt: skip


def _chord_fields(raw: Any, where: str, tasks: dict[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Its id, its header's signatures (a member may be a chord step: its body's end is
    the member's), the chord it is followed by (``then``), checked alike, its ``result_id``
    (the id its failure is written under: a chain body's last step's) and ``group``."""
    if not isinstance(raw, Mapping):
        raise InvalidArgument(where, "must be an object: id and header")
    unknown = sorted(set(raw) - {"id", "header", "then", "result_id", "group"})
    if unknown:
        raise InvalidArgument(f"{where}.{unknown[0]}", "is not a field of a chord step")
    chord_id = raw.get("id")
    for name, value in (("id", chord_id), ("result_id", raw.get("result_id", "given"))):
        if not isinstance(value, str) or not 0 < len(value) <= MAX_KEY - 10:
            raise InvalidArgument(f"{where}.{name}", f"must be 1 to {MAX_KEY - 10} characters")
    # An empty header (Celery's replace by an empty group): the body is made at once.
    members = _signatures(raw.get("header"), f"{where}.header", tasks)
    chord: dict[str, Any] = {"id": chord_id, "header": members}
    chord.update({"result_id": raw["result_id"]} if "result_id" in raw else {})
    if raw.get("group") is not None:  # its body is a group: the signature, then these
        chord["group"] = _signatures(raw["group"], f"{where}.group", tasks)
    if raw.get("then") is not None:
        chord["then"] = _chord_fields(raw["then"], f"{where}.then", tasks)
    return chord


def _signatures(raw: Any, where: str, tasks: dict[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    if not isinstance(raw, list | tuple):
        raise InvalidArgument(where, "must be a list of signatures")
    return [_signature(s, f"{where}[{i}]", tasks) for i, s in enumerate(raw)]


def signature_request(
    task: str, sig: Mapping[str, Any], options: Mapping[str, Any], settings: Mapping[str, Any],
    first: Sequence[Any], key: str | None, parent: str | None = None,
) -> EnqueueRequest:  # fmt: skip
    """The run of a checked signature ``sig``: ``first`` before its arguments, keyed by its
    task id, else ``key``; ``parent``: its parent's task id (``parent_id``)."""
    given = sig.get("request")
    return EnqueueRequest(
        task,
        args=[*first, *(sig.get("args") or ())],
        kwargs=dict(sig.get("kwargs") or {}),
        key=options.get("task_id") or key,
        queue=options.get("queue"),
        countdown=options.get("countdown"),
        eta=link_eta(options.get("eta")),
        priority=options.get("priority"),
        settings=settings,
        callbacks=continued(sig),
        errbacks=sig.get("errbacks") or (),
        replaces=sig.get("replaces"),
        request={**(given or {}), "parent_id": parent} if parent else given,
    )
