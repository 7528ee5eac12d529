"""Chained jobs: a child fires in the transaction that settles its parent."""

from __future__ import annotations

import json
import re
from typing import Any

from kernel import statements as st
from kernel.events import EventType
from kernel.occurrences.firing import admit, create_gated, lock_job
from kernel.transaction.tx import Tx

__all__ = [
    "DEFAULT_FANOUT",
    "MAX_CHAIN_DEPTH",
    "fanout_limit",
    "fire_children",
    "condition_matches",
    "outcome_text",
]

MAX_CHAIN_DEPTH = 10
#: A parent's fan-out bound when none of its children declares ``after.fanout``.
DEFAULT_FANOUT = 25


def fanout_limit(specs: list[dict[str, Any]]) -> int:
    """How many children of one parent may fire: the smallest ``after.fanout`` they declare."""
    return min((s["after"].get("fanout", DEFAULT_FANOUT) for s in specs), default=DEFAULT_FANOUT)


def outcome_text(result: Any, error: dict[str, Any] | None) -> str:
    """What a condition is matched against: the result as text, or the error
    (``CODE: message``) of a failure."""
    if error is not None:
        return f"{error.get('code', '')}: {error.get('message', '')}"
    return result if isinstance(result, str) else json.dumps(result, sort_keys=True, default=str)


def condition_matches(condition: str | None, text: str) -> bool:
    """``contains:<text>`` or ``regex:<pattern>`` against the parent's outcome text."""
    if condition is None:
        return True
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
    error: dict[str, Any] | None,
    parent_depth: int,
) -> None:
    """Create an occurrence for each job chained after ``parent_job`` that this outcome
    triggers, at most the parents' fan-out bound, each admitted like any occurrence."""
    children = tx.conn.execute(st.CHILD_JOBS, {"job_id": parent_job}).all()
    if not children:
        return
    depth = parent_depth + 1
    specs = {child.id: json.loads(child.spec) for child in children}
    limit = fanout_limit(list(specs.values()))
    text = outcome_text(result, None if succeeded else error)
    fired = 0
    for child in sorted(children, key=lambda c: c.id):
        spec = specs[child.id]
        after = spec["after"]
        wanted = after["on"]
        if wanted != "complete" and (wanted == "success") != succeeded:
            continue
        # The column, not the spec: enable/disable flips only the column.
        if not child.enabled:
            continue
        if not condition_matches(after.get("condition"), text):
            continue
        if depth > MAX_CHAIN_DEPTH:
            tx.emit(
                EventType.CHAIN_DEPTH_EXCEEDED, job_id=child.id, parent_id=parent_id, depth=depth
            )
            continue
        if fired >= limit:
            tx.emit(
                EventType.CHAIN_FANOUT_EXCEEDED, job_id=child.id, parent_id=parent_id, limit=limit
            )
            continue
        # Read from the locked row: a job cancel that held it meanwhile disabled it
        # (READ COMMITTED: CHILD_JOBS saw the job before that commit).
        if not lock_job(tx, child.id).enabled:
            continue
        fired += 1
        refused = admit(tx, child.id, spec)
        delay_ms = int(float(after.get("delay") or 0) * 1000)
        create_gated(
            tx,
            job_id=child.id,
            revision=child.revision,
            spec=spec,
            trigger_key=f"chain:{parent_id}",
            scheduled_for=tx.now + delay_ms,
            available_at=tx.now + delay_ms,
            refused=refused,
            parent_id=parent_id,
            chain_depth=depth,
        )
