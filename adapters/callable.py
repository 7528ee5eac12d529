"""The ``callable`` adapter: call a Python function named ``pkg.module:function``."""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from typing import Any

from adapters.base import CHECKPOINT_V1, AdapterError, BaseAdapter, ExecutionContext, read_payload
from kernel import CallablePayload

__all__ = ["CallableAdapter"]


class CallableAdapter(BaseAdapter):
    """Imports the function and calls it with the payload's args/kwargs.

    A function with a ``ctx`` parameter also receives the
    :class:`~adapters.base.ExecutionContext`, through which it checkpoints and
    sees cancellation. Resuming calls the same function; it finds its last
    checkpoint in ``ctx.resumed``.
    """

    kind = "callable"
    runtime_control = CHECKPOINT_V1

    def execute(self, ctx: ExecutionContext) -> Any:
        return self.call(ctx, read_payload(ctx.occurrence.payload, CallablePayload))

    def call(self, ctx: ExecutionContext, payload: CallablePayload) -> Any:
        """Call ``payload``'s function; returns what it returns, raises what it raises."""
        target, args, kwargs = payload.callable, payload.args, payload.kwargs
        function = _resolve(target)
        if _takes_ctx(function):
            if "ctx" in kwargs:
                raise AdapterError(
                    "INVALID_PAYLOAD",
                    f"payload.kwargs may not set 'ctx': {target} receives the context there",
                    retryable=False,
                )
            kwargs = {**kwargs, "ctx": ctx}
        return function(*args, **kwargs)


def _resolve(target: str) -> Callable[..., Any]:
    """Import ``pkg.module:attr.path`` and return the callable it names.

    Raises:
        AdapterError: non-retryable ``CALLABLE_NOT_FOUND`` when the import fails or
            the object is not callable.
    """
    module_name, _, attr_path = target.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for attr in attr_path.split("."):
            obj = getattr(obj, attr)
    except (ImportError, AttributeError) as exc:
        raise _not_found(target, f"{type(exc).__name__}: {exc}") from exc
    if not callable(obj):
        raise _not_found(target, f"{type(obj).__name__} object is not callable")
    function: Callable[..., Any] = obj
    return function


@functools.cache  # a signature per run cost as much as the kernel's own Python
def _takes_ctx(function: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):  # some builtins have no introspectable signature
        return False
    ctx = parameters.get("ctx")
    return ctx is not None and ctx.kind in (ctx.POSITIONAL_OR_KEYWORD, ctx.KEYWORD_ONLY)


def _not_found(target: str, reason: str) -> AdapterError:
    return AdapterError("CALLABLE_NOT_FOUND", f"cannot load {target!r}: {reason}", retryable=False)
