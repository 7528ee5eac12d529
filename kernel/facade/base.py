"""What every part of the facade shares: the session it runs transactions through."""

from __future__ import annotations

from collections.abc import Callable
from types import FunctionType
from typing import Any, TypeVar

import sqlalchemy as sa

from kernel import reads
from kernel.clock import Clock
from kernel.errors import InvalidArgument
from kernel.facade.arguments import checked
from kernel.session import Session
from kernel.types import ActionResult

__all__ = ["FacadeBase", "ms", "lease_ms"]

R = TypeVar("R")


def ms(seconds: float, field: str) -> int:
    """``seconds`` as whole milliseconds; InvalidArgument (``field``) unless positive."""
    if seconds <= 0:
        raise InvalidArgument(field, "must be positive")
    return int(seconds * 1000)


def lease_ms(lease: float | None) -> int | None:
    return None if lease is None else ms(lease, "lease")


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

    def _write(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        return self._session.run(fn, *args, **kwargs)

    def _read(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        return self._session.run(fn, *args, read_only=True, **kwargs)

    def _action(
        self, fn: Callable[..., bool], occurrence_id: int, request_id: str, **kwargs: Any
    ) -> ActionResult:
        """An operator action by request id, answered with the occurrence as it is now."""
        dedup = self._write(fn, occurrence_id, request_id=request_id, **kwargs)
        return self._answer(occurrence_id, request_id, dedup)

    def _answer(self, occurrence_id: int, request_id: str, deduplicated: bool) -> ActionResult:
        occurrence = self._read(reads.get_occurrence, occurrence_id)
        return ActionResult(occurrence, request_id, deduplicated)
