"""The ``callable`` adapter: call a Python function named ``pkg.module:function``."""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
from collections.abc import Callable, Mapping
from typing import Any

from adapters.base import CHECKPOINT_V1, AdapterError, BaseAdapter, ExecutionContext, read_payload
from kernel import CallablePayload, InvalidArgument

__all__ = ["CallableAdapter"]

#: The fields of a callable's payload (:class:`kernel.CallablePayload`): its function and
#: the arguments, whose model asks only that they be a list and a dict keyed by strings.
_FIELDS = frozenset({"callable", "args", "kwargs"})


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
        return self._invoke(ctx, *_call_of(ctx.occurrence.payload))

    def call(self, ctx: ExecutionContext, payload: CallablePayload) -> Any:
        """Call ``payload``'s function; returns what it returns, raises what it raises."""
        return self._invoke(ctx, payload.callable, payload.args, payload.kwargs)

    def _invoke(
        self, ctx: ExecutionContext, target: str, args: list[Any], kwargs: dict[str, Any]
    ) -> Any:
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


def _call_of(payload: Mapping[str, Any]) -> tuple[str, list[Any], dict[str, Any]]:
    """The function and arguments of a stored payload, as :class:`kernel.CallablePayload`
    reads them.

    A payload as the kernel stores it (a dict of those fields, the arguments a list and a
    dict with string keys, the function's name read by the model before) is taken as it
    is: the model's validation per run was most of the adapter's own cost
    (bench/README.md, session 25).
    Any other goes through the model, which refuses it with the field it names.

    Raises:
        AdapterError: non-retryable ``INVALID_PAYLOAD`` naming the field.
    """
    if type(payload) is dict and payload.keys() <= _FIELDS:
        target, args, kwargs = (
            payload.get("callable"),
            payload.get("args", []),
            payload.get("kwargs", {}),
        )
        if (
            type(target) is str
            and type(args) is list
            and type(kwargs) is dict
            and all(type(name) is str for name in kwargs)
            and _names_a_function(target)
        ):
            return target, args, kwargs
    model = read_payload(payload, CallablePayload)
    return model.callable, model.args, model.kwargs


@functools.lru_cache(maxsize=1024)
def _names_a_function(target: str) -> bool:
    """Whether the model takes ``target`` as a callable's name (asked once per name)."""
    try:
        CallablePayload.read({"callable": target})
    except InvalidArgument:
        return False
    return True


def _resolve(target: str) -> Callable[..., Any]:
    """Import ``pkg.module:attr.path`` and return the callable it names.

    Raises:
        AdapterError: non-retryable ``CALLABLE_NOT_FOUND`` when the import fails or
            the object is not callable.
    """
    module_name, _, attr_path = target.partition(":")
    try:
        obj: Any = _loaded(module_name) or importlib.import_module(module_name)
        for attr in attr_path.split("."):
            obj = getattr(obj, attr)
    except (ImportError, AttributeError) as exc:
        raise _not_found(target, f"{type(exc).__name__}: {exc}") from exc
    if not callable(obj):
        raise _not_found(target, f"{type(obj).__name__} object is not callable")
    function: Callable[..., Any] = obj
    return function


def _loaded(module_name: str) -> Any:
    """The module ``module_name`` when it is imported and done initializing, as
    ``importlib.import_module`` itself looks it up first (without its per-call machinery);
    else None, and the caller imports it (waiting for an import under way elsewhere)."""
    module = sys.modules.get(module_name)
    if module is None or getattr(getattr(module, "__spec__", None), "_initializing", False):
        return None
    return module


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
