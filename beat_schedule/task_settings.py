"""What a Celery task's own settings and an entry's ``options`` mean on the kernel.

A ``beat_schedule`` entry names a task whose decorator may set time limits and
automatic retries, and an ``options`` dict Celery would pass to ``apply_async``. On
the kernel the task body runs inside ``kernel.run_occurrence``, so each setting is
either turned into the job's own field (timeout, attempts, backoff: the kernel owns
the retry; ``expires``: the job's start deadline), carried on the published hint
(routing, priority, headers), or refused by name: nothing is dropped.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

from kernel import InvalidArgument

__all__ = ["HINT_OPTIONS", "expires_field", "hint_options", "task_fields"]

#: ``options`` keys the dispatch pump passes to ``send_task`` for the entry's hints.
HINT_OPTIONS = ("routing_key", "exchange", "priority", "headers")
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

    ``queue`` becomes the job's queue and ``expires`` its start deadline
    (:func:`expires_field`); neither is repeated here.

    Raises:
        InvalidArgument: ``options`` holds a key the kernel does not honour (``countdown``,
            ``link``, ...): the entry is refused naming it, never run without it.
    """
    refused = sorted(set(options) - {*HINT_OPTIONS, "queue", "expires"})
    if refused:
        raise InvalidArgument(
            "options",
            f"beat_schedule[{name!r}]: options {', '.join(refused)} are not honoured on the "
            f"kernel (it honours queue, expires, {', '.join(HINT_OPTIONS)}): remove them "
            "from the entry",
        )
    return {key: options[key] for key in HINT_OPTIONS if options.get(key) is not None}


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


def task_fields(name: str, task: Any) -> tuple[dict[str, Any], list[str]]:
    """Job spec fields from the task's time limits and automatic-retry settings.

    Returns (fields, warnings). The job gets the task's ``max_retries`` + 1 attempts
    (``retry_kwargs["max_retries"]`` under ``autoretry_for``): ``self.retry()`` and
    ``autoretry_for`` retry within them, any other exception is final, as under Celery.
    Delays are ``self.retry()``'s countdown or eta, else ``retry_backoff``'s exponential
    ones, else ``default_retry_delay``.
    """
    fields: dict[str, Any] = {}
    warnings: list[str] = []
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
