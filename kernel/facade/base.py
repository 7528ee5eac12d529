"""What every part of the facade shares: the session its transactions run through.

A method of a part is one transaction: ``@write`` or ``@read`` gives it the transaction
(``tx``, after ``self``) and owns its begin, commit and error translation, so the body
calls the kernel's functions itself and a reader (or a tool) follows the call from the
door to the statement. The method's public signature has no ``tx``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from types import FunctionType
from typing import Any, Concatenate, ParamSpec, TypeVar

import sqlalchemy as sa

from kernel import reads
from kernel.clock import Clock
from kernel.errors import InvalidArgument
from kernel.facade.arguments import checked
from kernel.session import Session
from kernel.tx import Tx
from kernel.types import ActionResult

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


def _transaction(
    method: Callable[Concatenate[F, Tx, P], R], read_only: bool
) -> Callable[Concatenate[F, P], R]:
    signature = inspect.signature(method)
    this, tx, *rest = signature.parameters.values()
    assert tx.name == "tx", f"{method.__qualname__}: the transaction comes after self"

    def run(self: F, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._session.run(lambda tx: method(self, tx, *args, **kwargs), read_only=read_only)

    functools.update_wrapper(run, method)
    run.__signature__ = signature.replace(parameters=[this, *rest])  # type: ignore[attr-defined]
    return run


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

    Every public method a part defines checks its arguments (:mod:`kernel.facade.arguments`).
    """

    engine: sa.Engine
    dialect: str
    clock: Clock
    _session: Session

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, member in vars(cls).items():
            if not name.startswith("_") and isinstance(member, FunctionType):
                setattr(cls, name, checked(member))
