"""What a succeeded run's result makes the kernel do beyond the settle, per adapter kind.

A kind whose result asks the kernel for more (a watchdog's alert and self-destruct,
:mod:`kernel.upkeep.watchdog_jobs`) registers a hook under its kind, and its runs put what
the hook reads under that key of their result (``{"watchdog": {...}}``). The settle of
every succeeded run calls :func:`after_success` in its own transaction, so the effect
commits with the settle or not at all; a result without a registered kind's key costs a
lookup. The kernel names no adapter: the facade registers the built-in kinds' hooks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kernel.db.tx import Tx

__all__ = ["ResultHook", "register", "wanted", "after_success"]

#: ``hook(tx, occurrence_id, job_id, fence, result)``: the settled run and its whole result.
ResultHook = Callable[[Tx, int, str, int, Any], None]

_HOOKS: dict[str, ResultHook] = {}


def register(kind: str, hook: ResultHook) -> None:
    """Have ``hook`` run when a run whose result carries the key ``kind`` succeeds."""
    _HOOKS[kind] = hook


def wanted(result: Mapping[str, Any]) -> bool:
    """Whether a registered kind's hook would act on this result."""
    return any(kind in result for kind in _HOOKS)


def after_success(tx: Tx, occurrence_id: int, job_id: str, fence: int, result: Any) -> None:
    """Run the hook of each registered kind whose key the succeeded run's result carries."""
    if isinstance(result, Mapping):
        for kind, hook in _HOOKS.items():
            if kind in result:
                hook(tx, occurrence_id, job_id, fence, result)
