"""What a Celery task's own settings and an entry's ``options`` mean on the kernel.

A ``beat_schedule`` entry names a task whose decorator may set time limits and
automatic retries, and an ``options`` dict Celery would pass to ``apply_async``. On
the kernel the task body runs inside ``kernel.run_occurrence``, so each setting is
either turned into the job's own field (timeout, attempts, backoff: the kernel owns
the retry; ``expires``: the job's start deadline; the rate limit, which the kernel keeps
across all workers), carried on the published hint (routing, headers), or refused by name:
nothing is dropped.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from celery.utils.time import rate
from kombu.connection import Connection

from kernel import InvalidArgument

__all__ = [
    "HINT_OPTIONS",
    "beat_request",
    "broker_priority",
    "expires_field",
    "hint_options",
    "kernel_priority",
    "task_fields",
]

#: ``options`` keys the dispatch pump passes to ``send_task`` for the entry's hints.
HINT_OPTIONS = ("routing_key", "exchange", "headers")
#: ``options`` keys that become job fields (``queue``, ``priority``, ``timeout``, ``expires``).
_JOB_OPTIONS = ("queue", "priority", "soft_time_limit", "time_limit", "expires")
#: Celery's priorities on Redis run the other way: 0 (also a message with none) first,
#: down to 9, which kombu clamps higher values to.
_REDIS_LAST = 9
#: Celery's default ``retry_backoff_max`` and ``default_retry_delay`` (seconds).
_BACKOFF_MAX = 600.0
_RETRY_DELAY = 180.0
#: Celery's ``retry_jitter`` draws each delay from [0, delay]; the kernel spreads a
#: delay by ± a fraction, and half of it keeps the same average.
_FULL_JITTER = 0.5
#: The kernel's ceiling for ``max_attempts``; Celery's ``max_retries=None`` is unbounded.
_MAX_ATTEMPTS = 1000


def hint_options(name: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """What the pump passes to ``send_task`` for this entry's hints.

    ``queue``, ``priority`` (:func:`kernel_priority`), the time limits and ``expires``
    (:func:`expires_field`) become job fields and are not repeated here.

    Raises:
        InvalidArgument: ``options`` holds a key the kernel does not honour (``countdown``,
            ``link``, ...): the entry is refused naming it, never run without it.
    """
    refused = sorted(set(options) - {*HINT_OPTIONS, *_JOB_OPTIONS})
    if refused:
        raise InvalidArgument(
            "options",
            f"beat_schedule[{name!r}]: options {', '.join(refused)} are not honoured on the "
            f"kernel (it honours {', '.join((*_JOB_OPTIONS, *HINT_OPTIONS))}): remove them "
            "from the entry",
        )
    return {key: options[key] for key in HINT_OPTIONS if options.get(key) is not None}


def beat_request(options: Mapping[str, Any], task: Any) -> dict[str, Any]:
    """The fields of the body's ``self.request`` Celery's Beat gives a firing of an entry of
    ``options`` (kept with the job's payload as a routed call's ``request``): the entry's
    custom headers with Beat's own ``celery_beat_task`` mark
    (``celery.beat.Scheduler.apply_async``), and the time limits, the entry's else the
    task's, as ``apply_async`` merges them."""
    fields = {
        "headers": {**(options.get("headers") or {}), "celery_beat_task": True},
        "time_limit": options.get("time_limit", getattr(task, "time_limit", None)),
        "soft_time_limit": options.get("soft_time_limit", getattr(task, "soft_time_limit", None)),
    }
    return {name: value for name, value in fields.items() if value is not None}


def expires_field(name: str, options: Mapping[str, Any], task: Any) -> dict[str, Any]:
    """The job's ``expires`` (seconds after each firing may start) from the entry's
    ``options.expires``, else the task's own ``expires``, as Celery's Beat passes them.

    Raises:
        InvalidArgument: a datetime (one instant cannot bound every firing of a recurring
            entry) or anything but a number of seconds.
    """
    expires = options.get("expires")
    if expires is None and task is not None:
        expires = getattr(task, "expires", None)
    if expires is None:
        return {}
    if isinstance(expires, bool) or not isinstance(expires, numbers.Real):
        raise InvalidArgument(
            "options",
            f"beat_schedule[{name!r}]: options.expires {expires!r} is one instant, which "
            "cannot bound every firing of a recurring entry: give a number of seconds after "
            "each firing",
        )
    return {"expires": float(expires)}


@lru_cache(maxsize=16)
def _lower_first(broker_url: str | None, transport: str | None) -> bool:
    """Whether Celery's priorities on this broker run lower first (Redis: kombu's
    ``priority_steps`` queues, polled from step 0); AMQP's run higher first."""
    driver = Connection(broker_url, transport=transport).transport.driver_type  # type: ignore[no-untyped-call]
    return bool(driver == "redis")


def _redis_flip(conf: Any) -> bool:
    return _lower_first(conf.get("broker_url"), conf.get("broker_transport"))


def kernel_priority(conf: Any, value: Any, field: str) -> int:
    """Celery's ``priority`` ``value`` on the app's broker as the kernel's (0-255, higher
    first): as given under AMQP; on Redis, where Celery runs 0 first and 9 last, ``9 -
    value`` (values above 9 are 9 there, as kombu clamps them).

    Raises:
        InvalidArgument: not an integer from 0 to 255, naming ``field``.
    """
    if type(value) is not int or not 0 <= value <= 255:
        raise InvalidArgument(field, f"{value!r}: Celery's priority is an integer from 0 to 255")
    return _REDIS_LAST - min(value, _REDIS_LAST) if _redis_flip(conf) else value


def broker_priority(conf: Any, priority: int) -> int | None:
    """The ``send_task`` priority of a hint whose run has the kernel's ``priority``: the
    inverse of :func:`kernel_priority`; None for the kernel's default 0 on Redis, which
    (sent without one) waits in the queue Celery's own unprioritised messages use."""
    if not priority:  # most runs': no configuration to read
        return None
    return _REDIS_LAST - min(priority, _REDIS_LAST) if _redis_flip(conf) else priority


def _limits(value: Any) -> bool:
    """Whether Celery reads the task's ``rate_limit`` as a limit (none and 0 are none); one
    Celery cannot read is the job's too, and the job spec's check refuses it naming it."""
    try:
        return bool(value) and bool(rate(value))
    except (KeyError, ValueError, TypeError):
        return True


def task_fields(name: str, task: Any) -> tuple[dict[str, Any], list[str]]:
    """Job spec fields from the task's priority, rate limit, time limits and automatic-retry
    settings.

    Returns (fields, warnings). The job gets the task's ``max_retries`` + 1 attempts
    (``retry_kwargs["max_retries"]`` under ``autoretry_for``): ``self.retry()`` and
    ``autoretry_for`` retry within them, any other exception is final, as under Celery.
    Delays are ``self.retry()``'s countdown or eta, else ``retry_backoff``'s exponential
    ones, else ``default_retry_delay``.
    """
    fields: dict[str, Any] = {}
    warnings: list[str] = []
    if task.priority is not None:
        fields["priority"] = kernel_priority(task.app.conf, task.priority, "priority")
    # Celery's own reading: none or 0 is no limit, and worker_disable_rate_limits drops them.
    if _limits(task.rate_limit) and not task.app.conf.worker_disable_rate_limits:
        fields["rate_limit"] = task.rate_limit
    limits = [v for v in (task.soft_time_limit, task.time_limit) if v]
    if limits:
        # The soft limit (or the hard one) is the job's timeout: the worker publishes
        # it as the hint's soft time limit, so the body stops and the run settles
        # as a TIMEOUT failure the kernel retries by its policy.
        fields["timeout"] = float(limits[0])
    autoretry = bool(getattr(task, "autoretry_for", ()))
    retry_kwargs = dict(getattr(task, "retry_kwargs", None) or {}) if autoretry else {}
    max_retries = retry_kwargs.get("max_retries", task.max_retries)
    if max_retries is None:
        warnings.append(
            f"beat_schedule[{name!r}]: task {task.name} retries without limit; the kernel "
            f"allows at most {_MAX_ATTEMPTS} attempts"
        )
        fields["max_attempts"] = _MAX_ATTEMPTS
    else:
        fields["max_attempts"] = min(int(max_retries) + 1, _MAX_ATTEMPTS)
    backoff = float(getattr(task, "retry_backoff", False) or 0) if autoretry else 0.0
    if backoff:
        ceiling = float(getattr(task, "retry_backoff_max", _BACKOFF_MAX))
        start = max(1.0, backoff)
        fields["retry"] = {
            "backoff": start,
            "factor": 2.0,
            "max": max(ceiling, start),
            "jitter": _FULL_JITTER if getattr(task, "retry_jitter", True) else 0.0,
        }
    else:
        delay = float(retry_kwargs.get("countdown", task.default_retry_delay or _RETRY_DELAY))
        fields["retry"] = {"backoff": delay, "factor": 1.0, "max": delay, "jitter": 0.0}
    return fields, warnings
