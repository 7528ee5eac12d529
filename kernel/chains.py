"""Chained jobs: a child fires in the transaction that settles its parent."""

from __future__ import annotations

import json
import re
from typing import Any

from kernel import statements as st
from kernel.events import EventType
from kernel.gates import create_gated
from kernel.tx import Tx

__all__ = ["MAX_CHAIN_DEPTH", "MAX_CHILDREN", "fire_children", "condition_matches"]

MAX_CHAIN_DEPTH = 10
MAX_CHILDREN = 32


def condition_matches(condition: str | None, result: Any) -> bool:
    """``contains:<text>`` or ``regex:<pattern>`` against the parent's result as text."""
    if condition is None:
        return True
    text = result if isinstance(result, str) else json.dumps(result, sort_keys=True, default=str)
    kind, _, operand = condition.partition(":")
    if kind == "contains":
        return operand in text
    return re.search(operand, text) is not None


def fire_children(
    tx: Tx,
    *,
    parent_id: int,
    parent_job: str,
    succeeded: bool,
    result: Any,
    parent_depth: int,
) -> None:
    """Create an occurrence for each job chained after ``parent_job`` that this outcome triggers."""
    children = tx.conn.execute(st.CHILD_JOBS, {"job_id": parent_job}).all()
    if not children:
        return
    depth = parent_depth + 1
    for child in children[:MAX_CHILDREN]:
        spec = json.loads(child.spec)
        after = spec["after"]
        wanted = after["on"]
        if wanted != "complete" and (wanted == "success") != succeeded:
            continue
        # The column, not the spec: enable/disable flips only the column.
        if not child.enabled:
            continue
        if succeeded and not condition_matches(after.get("condition"), result):
            continue
        if depth > MAX_CHAIN_DEPTH:
            tx.emit(
                EventType.CHAIN_DEPTH_EXCEEDED, job_id=child.id, parent_id=parent_id, depth=depth
            )
            continue
        delay_ms = int(float(after.get("delay") or 0) * 1000)
        create_gated(
            tx,
            job_id=child.id,
            revision=child.revision,
            spec=spec,
            trigger_key=f"chain:{parent_id}",
            scheduled_for=tx.now + delay_ms,
            available_at=tx.now + delay_ms,
            parent_id=parent_id,
            chain_depth=depth,
        )
