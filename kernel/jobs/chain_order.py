"""The order a batch of job definitions is applied in: a parent before its chained jobs.

A chained job's parent must exist when the job is defined, so a job file may list a
child before its parent and still apply in one transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["parents_first"]


def _parents(raw: Mapping[str, Any]) -> list[object]:
    """The jobs ``raw`` is chained after: its ``after.job``, or a fan-in's ``after.all``."""
    after = raw.get("after")
    if not isinstance(after, Mapping):
        return []
    named = after.get("all")
    return list(named) if isinstance(named, list) else [after.get("job")]


def parents_first(raws: Sequence[Mapping[str, Any]]) -> list[int]:
    """Indices of ``raws`` with each job after the batch's jobs it is chained after.

    Otherwise the given order is kept. A cycle keeps it too: applying it names the cycle.
    """
    index_of = {raw.get("id"): i for i, raw in enumerate(raws) if isinstance(raw.get("id"), str)}
    order: list[int] = []
    placed: set[int] = set()

    def place(index: int, path: set[int]) -> None:
        if index in placed or index in path:
            return
        for parent in _parents(raws[index]):
            found = index_of.get(parent) if isinstance(parent, str) else None
            if found is not None:
                place(found, path | {index})
        placed.add(index)
        order.append(index)

    for start in range(len(raws)):
        place(start, set())
    return order
