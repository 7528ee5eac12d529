"""A canvas step's options as the kernel takes them: which it honours (the rest refused by
name, but Celery's own bookkeeping of a message the kernel does not send), its stamps as its
run's request fields, and its arguments as Celery's JSON serializer puts them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from kombu.utils.json import dumps

from kernel import InvalidArgument

__all__ = ["celery_json", "many", "refuse_options", "stamps_request"]

#: A step's options about Celery's own bookkeeping of a message the kernel does not send.
#: (Not ``chord``: a step carrying one is a member of a chord Celery counts in its
#: backend, which a kernel run never reports to: dropped, the chord would wait forever.)
_UNUSED_STEP_OPTIONS = frozenset(
    {"reply_to", "parent_id", "root_id", "group_id", "group_index", "serializer",
     "add_to_parent", "stamped_headers", "stamps", "replaced_task_nesting"}
)  # fmt: skip


def many(value: Any) -> Sequence[Any]:
    if value is None:
        return ()
    return list(value) if isinstance(value, list | tuple) else [value]


def refuse_options(options: Mapping[str, Any], honoured: set[str], where: str) -> None:
    """Refuse a canvas's ``options`` not ``honoured`` (but Celery's bookkeeping), naming
    the first at ``where`` (InvalidArgument)."""
    # A signature's stamps are options too, named by its ``stamped_headers``: a task's
    # reach its run's request (:func:`stamps_request`); a canvas's own are its tasks' already
    # (Celery's stamping visits every signature of it).
    stamps = set(many(options.get("stamped_headers")))
    refused = sorted(
        name
        for name, value in options.items()
        if value not in (None, False, [], ())
        and name not in honoured | _UNUSED_STEP_OPTIONS | stamps
    )
    if "chord" in refused:
        raise InvalidArgument(
            f"{where}.options.chord",
            "a step of a chord that Celery counts itself (its header not routed through "
            "the kernel, kernel_route_tasks) never reports to it; route the chord's tasks "
            "too, or none of its steps",
        )
    if refused:
        raise InvalidArgument(
            f"{where}.options.{refused[0]}",
            f"a step of a canvas routed through the kernel (kernel_route_tasks) honours "
            f"only {', '.join(sorted(honoured))}; call it without {refused[0]}",
        )


def celery_json(value: Any) -> Any:
    """``value`` as Celery's JSON serializer puts it in a message: bytes, datetime, Decimal,
    UUID tagged (``{"__type__": ..., "__value__": ...}``), which the kernel stores as JSON
    and its worker decodes (:func:`adapters.task.arguments`); a value that is no JSON even
    so as it is, for the kernel to refuse naming where."""
    try:
        return json.loads(dumps(value))  # type: ignore[no-untyped-call]
    except (TypeError, ValueError):
        return value


def stamps_request(options: Mapping[str, Any]) -> dict[str, Any]:
    """A task signature's stamps as its run's request fields (``stamped_headers`` and
    ``stamps``, as Celery's message carries them for its worker's request), or nothing."""
    stamped = [str(name) for name in many(options.get("stamped_headers"))]
    if not stamped:
        return {}
    stamps = {name: celery_json(options.get(name)) for name in stamped}
    return {"request": {"stamped_headers": stamped, "stamps": stamps}}
