"""The order a batch of job definitions is applied in: a parent before its chained jobs.

A chained job's parent must exist when the job is defined, so a job file may list a
child before its parent and still apply in one transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["parents_first"]


def _parent(raw: Mapping[str, Any]) -> object:
    after = raw.get("after")
    return after.get("job") if isinstance(after, Mapping) else None


def parents_first(raws: Sequence[Mapping[str, Any]]) -> list[int]:
    """Indices of ``raws`` with each job after the batch's job it is chained after.

    Otherwise the given order is kept. A cycle keeps it too: applying it names the cycle.
    """
    index_of = {raw.get("id"): i for i, raw in enumerate(raws) if isinstance(raw.get("id"), str)}
    order: list[int] = []
    placed: set[int] = set()
    for start in range(len(raws)):
        chain: list[int] = []
        index: int | None = start
        while index is not None and index not in placed and index not in chain:
            chain.append(index)
            index = index_of.get(_parent(raws[index]))
        for link in reversed(chain):
            placed.add(link)
            order.append(link)
    return order
