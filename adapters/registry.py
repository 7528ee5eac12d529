"""Adapter discovery through the ``celery_kernel.adapters`` entry-point group.

The built-in adapters are registered by this project's own distribution, so a
failure to load one of them is a bug and is raised. A third-party entry point
that cannot be imported, whose factory fails, or whose object is not an
adapter is logged and skipped: one broken plug-in must not stop workers from
running the built-in kinds. Two adapters claiming the same ``kind`` are refused
outright, because silently choosing one would run occurrences with the wrong code.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from adapters.base import Adapter, RuntimeControl
from kernel import InvalidArgument

__all__ = ["ENTRY_POINT_GROUP", "load_adapters", "declared_safe_points"]

ENTRY_POINT_GROUP = "celery_kernel.adapters"
_OWN_DISTRIBUTION = "celery-kernel"

log = logging.getLogger(__name__)


def load_adapters(app: Any = None) -> dict[str, Adapter]:
    """Instantiate every registered adapter, keyed by its ``kind``.

    Args:
        app: the Celery app, handed to each factory as ``factory(app=app)``.

    Returns:
        A new dict ``{kind: adapter}``.

    Raises:
        InvalidArgument: two entry points declare the same ``kind``.
        Exception: a built-in adapter failed to load (whatever it raised).
    """
    adapters: dict[str, Adapter] = {}
    sources: dict[str, str] = {}
    # Whether each is ours, read once: each read parses its distribution's metadata.
    found = [(not _is_builtin(ep), ep.name, ep) for ep in entry_points(group=ENTRY_POINT_GROUP)]
    # Built-ins first, so a clash names the plug-in as the second declaration.
    for plugin, _, entry_point in sorted(found, key=lambda item: item[:2]):
        source = f"{entry_point.name} = {entry_point.value}"
        if not plugin:
            adapter = _instantiate(entry_point, app)
        else:
            try:
                adapter = _instantiate(entry_point, app)
            except Exception:
                log.exception(
                    "adapter entry point %s skipped: it failed to load",
                    source,
                    extra={"action": "adapter_load_failed", "entry_point": entry_point.name},
                )
                continue
        if adapter.kind in adapters:
            raise InvalidArgument(
                f"adapter kind {adapter.kind!r}",
                f"declared by both {sources[adapter.kind]!r} and {source!r}; uninstall one of them",
                kind=adapter.kind,
            )
        adapters[adapter.kind] = adapter
        sources[adapter.kind] = source
    return adapters


def declared_safe_points(adapter: Adapter, payload: Mapping[str, Any]) -> tuple[str, ...]:
    """The safe points ``adapter`` declares for one payload.

    An adapter may narrow its kind's declaration per payload with
    ``safe_points_for(payload)`` (a ``task`` whose body never checkpoints has only
    ``before_execute``); otherwise its ``runtime_control`` applies to every payload.
    """
    narrow = getattr(adapter, "safe_points_for", None)
    if callable(narrow):
        return tuple(narrow(payload))
    return adapter.runtime_control.safe_points


def _instantiate(entry_point: EntryPoint, app: Any) -> Adapter:
    adapter = entry_point.load()(app=app)
    if not isinstance(adapter, Adapter):
        raise TypeError(f"{entry_point.value} did not produce an adapter (got {adapter!r})")
    if not isinstance(adapter.runtime_control, RuntimeControl):
        raise TypeError(f"{entry_point.value} declares no RuntimeControl")
    if not isinstance(adapter.kind, str) or not adapter.kind:
        raise TypeError(f"{entry_point.value} declares no kind")
    return adapter


def _is_builtin(entry_point: EntryPoint) -> bool:
    dist = entry_point.dist
    return dist is not None and re.sub(r"[-_.]+", "-", dist.name).lower() == _OWN_DISTRIBUTION
