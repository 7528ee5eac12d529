"""A routed call's canvas options as kernel links: ``link``, ``link_error`` and a chain's
rest (``options['chain']``, as Celery's ``_chain.run`` passes it to the first step's
``apply_async``) become the plain JSON signatures the kernel stores with the occurrence
and enqueues when it settles (kernel/spec/enqueue_request.py), whether their tasks are
routed or not: the kernel makes each step durably, exactly once.

A chord among the steps (``chain(a, chord(header, body), d)``, and a group followed by a
task, which Celery makes a chord) is one link too: the body's signature carrying the
chord's id and header (kernel/spec/enqueue_request.py); the step before it makes the
members, the last member the body, and the steps after it follow the body.

What a link cannot carry is refused when the canvas is applied, naming it: a group or a
nested chain among the steps, a chord's member that is a canvas, and step options the
kernel does not honour (``expires``, ...). A step's ``eta`` is stored as ISO text (a link
is JSON), made aware in the app's zone as Celery reads a naive one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from celery.utils import uuid
from celery.utils.time import maybe_make_aware
from kombu.utils.json import dumps

from kernel import InvalidArgument

__all__ = ["CANVAS_OPTIONS", "celery_json", "link_signature", "links"]

#: The apply_async options this module turns into links.
CANVAS_OPTIONS = frozenset({"link", "link_error", "chain"})
#: A step's options a kernel link honours.
_STEP_OPTIONS = ("task_id", "queue", "countdown", "eta", "priority")
#: A step's options about Celery's own bookkeeping of a message the kernel does not send.
_UNUSED_STEP_OPTIONS = frozenset(
    {"reply_to", "parent_id", "root_id", "group_id", "group_index", "chord", "serializer",
     "add_to_parent", "stamped_headers", "stamps"}
)  # fmt: skip


def links(options: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(callbacks, errbacks) of a routed call's ``options``: its ``link`` signatures and
    the chain's next step (carrying the steps after it), and its ``link_error`` ones.

    Raises:
        InvalidArgument: a step is a group, chord or chain, or has an option a link
            cannot honour (``field`` names where).
    """
    callbacks = [link_signature(s, f"link[{i}]") for i, s in enumerate(_many(options.get("link")))]
    errbacks = [
        link_signature(s, f"link_error[{i}]")
        for i, s in enumerate(_many(options.get("link_error")))
    ]
    # Celery keeps the rest reversed: the next step is the list's last.
    rest = list(reversed(options.get("chain") or ()))
    steps = [link_signature(s, f"chain[{i}]") for i, s in enumerate(rest)]
    for step, after in zip(steps, steps[1:], strict=False):
        step["callbacks"].insert(0, after)
    return (steps[:1] + callbacks, errbacks)


def _many(value: Any) -> Sequence[Any]:
    if value is None:
        return ()
    return list(value) if isinstance(value, list | tuple) else [value]


def _refuse(options: Mapping[str, Any], honoured: set[str], where: str) -> None:
    refused = sorted(
        name
        for name, value in options.items()
        if value not in (None, False, [], ()) and name not in honoured | _UNUSED_STEP_OPTIONS
    )
    if refused:
        raise InvalidArgument(
            f"{where}.options.{refused[0]}",
            f"a step of a canvas routed through the kernel (kernel_route_tasks) honours "
            f"only {', '.join(sorted(honoured))}; call it without {refused[0]}",
        )


def _chord_step(sig: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A chord among a canvas's steps as one link: its body's, carrying the chord's id
    (Celery's group id, frozen with the chain) and its header's members."""
    _refuse(dict(sig.get("options") or {}), {"task_id"}, where)
    kwargs = sig.get("kwargs") or {}
    if kwargs.get("kwargs"):
        raise InvalidArgument(
            f"{where}.kwargs", "a chord step's own kwargs are not passed on; give them to its body"
        )
    header = kwargs.get("header") or ()
    if isinstance(header, Mapping):  # a group: its tasks
        header = (header.get("kwargs") or {}).get("tasks") or ()
    group_id = (sig.get("options") or {}).get("task_id") or uuid()
    members = [link_signature(m, f"{where}.header[{i}]") for i, m in enumerate(header)]
    body = link_signature(kwargs.get("body") or {}, f"{where}.body")
    return {**body, "chord": {"id": group_id, "header": members}}


def celery_json(value: Any) -> Any:
    """``value`` as Celery's JSON serializer puts it in a message: bytes, datetime, Decimal,
    UUID tagged (``{"__type__": ..., "__value__": ...}``), which the kernel stores as JSON
    and its worker decodes (:func:`adapters.task.arguments`); a value that is no JSON even
    so as it is, for the kernel to refuse naming where."""
    try:
        return json.loads(dumps(value))  # type: ignore[no-untyped-call]
    except (TypeError, ValueError):
        return value


def link_signature(sig: Mapping[str, Any], where: str) -> dict[str, Any]:
    """One Celery signature (a Signature is a dict) as a kernel link (a step, a link, a
    chord's body); InvalidArgument as :func:`links`, ``where`` first in its field."""
    kind = sig.get("subtask_type")
    if kind == "chord":
        return _chord_step(sig, where)
    if kind:
        raise InvalidArgument(
            where,
            f"a {kind} inside a canvas routed through the kernel (kernel_route_tasks) is "
            "not made durable yet; apply it on its own, or leave its tasks out of "
            "kernel_route_tasks",
        )
    options = dict(sig.get("options") or {})
    _refuse(options, {*_STEP_OPTIONS, *CANVAS_OPTIONS}, where)
    if isinstance(options.get("eta"), datetime):
        options["eta"] = maybe_make_aware(options["eta"]).isoformat()
    nested, errbacks = links({name: options.get(name) for name in CANVAS_OPTIONS})
    return {
        "task": sig.get("task"),
        "args": celery_json(list(sig.get("args") or ())),
        "kwargs": celery_json(dict(sig.get("kwargs") or {})),
        "immutable": bool(sig.get("immutable")),
        "options": {name: options[name] for name in _STEP_OPTIONS if options.get(name) is not None},
        "callbacks": nested,
        "errbacks": errbacks,
    }
