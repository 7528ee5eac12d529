"""What every part of the facade shares: the session its transactions run through, and the
checks of its arguments.

A method of a part is one transaction: ``@write`` or ``@read`` gives it the transaction
(``tx``, after ``self``) and owns its begin, commit and error translation, so the body
calls the kernel's functions itself and a reader (or a tool) follows the call from the
door to the statement. The method's public signature has no ``tx``.

Every public ``Kernel`` method checks its arguments against its own annotations.

A wrong type or a value the database cannot hold (an integer past 64 bits, a float that
is not finite, a name with a NUL character, which PostgreSQL's text refuses) is refused
as ``INVALID_ARGUMENT`` naming the argument (``occurrence_id``, ``firings[2][1]``),
before any transaction: it never reaches the driver as a ``ProgrammingError`` or
``DataError``. Free text and nested data (a run's output, a message, a spec) are stored
JSON-encoded, where a NUL is just a character.

:class:`FacadeBase` applies :func:`checked` to each public method a
facade part (or ``Kernel``) defines, so a method added later is checked as well. The
annotations are read on a method's first call (they may name types imported late).
"""

from __future__ import annotations

import functools
import inspect
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from types import FunctionType
from typing import Any, Concatenate, ParamSpec, TypeVar, Union

import sqlalchemy as sa

from kernel import reads
from kernel.db.clock import Clock
from kernel.errors import InvalidArgument
from kernel.occurrences import dispatch
from kernel.transaction.session import Session
from kernel.transaction.tx import Tx
from kernel.types import ActionResult, DispatchHint

__all__ = ["FacadeBase", "write", "read", "answered", "ms", "lease_ms"]

P = ParamSpec("P")
R = TypeVar("R")
F = TypeVar("F", bound="FacadeBase")


def ms(seconds: float, field: str) -> int:
    """``seconds`` as whole milliseconds; InvalidArgument (``field``) unless positive."""
    if seconds <= 0:
        raise InvalidArgument(field, "must be positive")
    return int(seconds * 1000)


def lease_ms(lease: float | None) -> int | None:
    return None if lease is None else ms(lease, "lease")


def timeout_ms(default_timeout: float | None) -> int | None:
    return None if default_timeout is None else ms(default_timeout, "default_timeout")


def _transaction(
    method: Callable[Concatenate[F, Tx, P], R], read_only: bool
) -> Callable[Concatenate[F, P], R]:
    signature = inspect.signature(method)
    this, tx, *rest = signature.parameters.values()
    assert tx.name == "tx", f"{method.__qualname__}: the transaction comes after self"

    def run(self: F, /, *args: P.args, **kwargs: P.kwargs) -> R:
        if read_only:
            return self._session.run(lambda tx: method(self, tx, *args, **kwargs), read_only=True)
        return run_write(self, lambda tx: method(self, tx, *args, **kwargs))

    functools.update_wrapper(run, method)
    run.__signature__ = signature.replace(parameters=[this, *rest])  # type: ignore[attr-defined]
    return run


def run_write(kernel: FacadeBase, fn: Callable[..., R], *args: Any) -> R:
    """``fn(tx, *args)`` as one write transaction; the runs it made published once it has
    committed (``kernel.on_runs_made``)."""
    publish = kernel.on_runs_made
    if publish is None:
        return kernel._session.run(fn, *args)
    value, made = kernel._session.run(_with_made, fn, *args)
    if made:
        publish(made)
    return value  # type: ignore[no-any-return]


def _with_made(tx: Tx, fn: Callable[..., R], *args: Any) -> tuple[R, list[DispatchHint]]:
    """``fn``'s value and the runs its transaction made (the attempt that commits sets them)."""
    return fn(tx, *args), dispatch.hint_made(tx)


def write(method: Callable[Concatenate[F, Tx, P], R]) -> Callable[Concatenate[F, P], R]:
    """The method is one write transaction (its ``tx`` after ``self``)."""
    return _transaction(method, read_only=False)


def read(method: Callable[Concatenate[F, Tx, P], R]) -> Callable[Concatenate[F, P], R]:
    """The method is one read-only transaction (its ``tx`` after ``self``)."""
    return _transaction(method, read_only=True)


def answered(tx: Tx, occurrence_id: int, request_id: str, deduplicated: bool) -> ActionResult:
    """An operator action's answer: the occurrence as the action left it."""
    return ActionResult(reads.get_occurrence(tx, occurrence_id), request_id, deduplicated)


class FacadeBase:
    """The kernel's engine, clock and session; ``Kernel.__init__`` sets them.

    Every public method a part defines checks its arguments (:func:`checked`).
    """

    engine: sa.Engine
    dialect: str
    clock: Clock
    _session: Session
    #: Called once a write commits with the runs it made that may run now (a settle's
    #: chain step, chord body, errback, replacement), marked hinted by it; None: Beat's
    #: pump hints them at its next tick.
    on_runs_made: Callable[[list[DispatchHint]], None] | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, member in vars(cls).items():
            if not name.startswith("_") and isinstance(member, FunctionType):
                setattr(cls, name, checked(member))


# -- argument checks -----------------------------------------------------------------

#: A check of one value: raises InvalidArgument naming ``field``.
Check = Callable[[object, str], None]

_INT64 = (-(2**63), 2**63 - 1)
#: Text arguments stored JSON-encoded, where a NUL character is allowed (a run's output
#: included); other strings are names: ids, owners, keys, statuses.
_FREE_TEXT = frozenset({"message", "reason", "chunks"})
_CHECKED = "__kernel_checked__"


def checked(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` with its arguments checked against its annotations on every call."""
    if getattr(method, _CHECKED, False):
        return method
    compiled: list[tuple[list[tuple[str, Check]], dict[str, Check]]] = []

    def compile_checks() -> tuple[list[tuple[str, Check]], dict[str, Check]]:
        hints = typing.get_type_hints(method)
        # The public signature: a transaction's method (:func:`write`, :func:`read`) hides its tx.
        _self, *params = inspect.signature(method).parameters.values()
        by_name = {p.name: _check_of(hints.get(p.name, Any), p.name in _FREE_TEXT) for p in params}
        positional = [
            (p.name, by_name[p.name]) for p in params if p.kind == p.POSITIONAL_OR_KEYWORD
        ]
        # An argument of any value needs no call: only the others are checked per call
        # (this wrapper runs on every claim and settle of every worker).
        checked_names = {name: check for name, check in by_name.items() if check is not _anything}
        return positional, checked_names

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not compiled:  # two threads may both compile: the same checks either way
            compiled.append(compile_checks())
        positional, by_name = compiled[0]
        if args:
            for (name, check), value in zip(positional, args, strict=False):
                check(value, name)
        for name, value in kwargs.items():
            named = by_name.get(name)
            if named is not None:  # also an unknown keyword: the call itself raises TypeError
                named(value, name)
        return method(self, *args, **kwargs)

    setattr(run, _CHECKED, True)
    return run


def _check_of(tp: Any, free_text: bool = True) -> Check:
    """The check of annotation ``tp`` (the kinds the facade's signatures use); a ``str``
    that is not ``free_text`` is a name."""
    if tp is Any or tp is object or isinstance(tp, typing.TypeVar):
        return _anything
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Union or origin is types.UnionType:
        return _one_of([_check_of(arg, free_text) for arg in args], _describe(tp))
    if origin is tuple and args and args[-1] is not Ellipsis:
        return _fixed_tuple([_check_of(arg, free_text) for arg in args], _describe(tp))
    if origin in (Sequence, list, tuple):
        return _sequence(_check_of(args[0], free_text) if args else _anything, _describe(tp))
    if origin in (Mapping, dict):
        key, value = (_check_of(a) for a in args) if args else (_anything, _anything)
        return _mapping(key, value, _describe(tp))
    if tp is type(None):
        return _is_none
    if tp is bool:
        return _bool
    if tp is int:
        return _int
    if tp is float:
        return _float
    if tp is str:
        return _str if free_text else _name
    if isinstance(tp, type):
        return _instance(tp)
    return _anything  # an annotation this module does not read: left to the method


def _refuse(value: object, field: str, expected: str) -> InvalidArgument:
    return InvalidArgument(field, f"must be {expected}, not {type(value).__name__}")


def _anything(value: object, field: str) -> None:
    pass


def _is_none(value: object, field: str) -> None:
    if value is not None:
        raise _refuse(value, field, "null")


def _bool(value: object, field: str) -> None:
    if not isinstance(value, bool):
        raise _refuse(value, field, "true or false")


def _int(value: object, field: str) -> None:
    if type(value) is int and -(2**63) <= value <= 2**63 - 1:  # folded to constants
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise _refuse(value, field, "an integer")
    if not _INT64[0] <= value <= _INT64[1]:
        raise InvalidArgument(field, f"must fit in 64 bits, not {value}")


def _float(value: object, field: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _refuse(value, field, "a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidArgument(field, f"must be a finite number, not {value}")


def _str(value: object, field: str) -> None:
    if not isinstance(value, str):
        raise _refuse(value, field, "a string")


def _name(value: object, field: str) -> None:
    """A string stored as plain text, where PostgreSQL refuses a NUL character."""
    if type(value) is str and "\x00" not in value:
        return
    if not isinstance(value, str):
        raise _refuse(value, field, "a string")
    if "\x00" in value:
        raise InvalidArgument(field, "must not contain a NUL character")


def _instance(cls: type) -> Check:
    def check(value: object, field: str) -> None:
        if not isinstance(value, cls):
            raise _refuse(value, field, f"a {cls.__name__}")

    return check


def _one_of(checks: list[Check], expected: str) -> Check:
    if len(checks) == 2 and _is_none in checks:  # X | None, the common case
        (other,) = [c for c in checks if c is not _is_none]

        def optional(value: object, field: str) -> None:
            if value is not None:
                other(value, field)

        return optional

    def check(value: object, field: str) -> None:
        for each in checks:
            try:
                each(value, field)
            except InvalidArgument:
                continue
            return
        raise _refuse(value, field, expected)

    return check


def _sequence(item: Check, expected: str) -> Check:
    def check(value: object, field: str) -> None:
        if isinstance(value, str | bytes) or not isinstance(value, Sequence):
            raise _refuse(value, field, expected)
        if item is not _anything:
            for index, each in enumerate(value):
                item(each, f"{field}[{index}]")

    return check


def _fixed_tuple(items: list[Check], expected: str) -> Check:
    def check(value: object, field: str) -> None:
        if not isinstance(value, tuple | list) or len(value) != len(items):
            raise _refuse(value, field, expected)
        for index, (item, each) in enumerate(zip(items, value, strict=True)):
            item(each, f"{field}[{index}]")

    return check


def _mapping(key: Check, item: Check, expected: str) -> Check:
    def check(value: object, field: str) -> None:
        if not isinstance(value, Mapping):
            raise _refuse(value, field, expected)
        for name, each in value.items():
            key(name, f"{field} key {name!r}")
            item(each, f"{field}[{name!r}]")

    return check


def _describe(tp: Any) -> str:
    """An annotation in words: ``a list of str``, ``(str, datetime)``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Union or origin is types.UnionType:
        return " or ".join(_describe(arg) for arg in args)
    if origin is tuple and args and args[-1] is not Ellipsis:
        return f"a pair ({', '.join(_describe(arg) for arg in args)})"
    if origin in (Sequence, list, tuple):
        return f"a list of {_describe(args[0])}" if args and args[0] is not Any else "a list"
    if origin in (Mapping, dict):
        return f"an object of {_describe(args[1])}" if args and args[1] is not Any else "an object"
    if tp is type(None):
        return "null"
    if tp is Any:
        return "anything"
    return getattr(tp, "__name__", str(tp))
