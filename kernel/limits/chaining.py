"""What a settled parent lets through to the jobs chained after it (``after``): the
condition on its outcome, the chain's depth bound and the parent's fan-out bound."""

from __future__ import annotations

import json
import re
from typing import Any

from kernel.spec.sections import DEFAULT_FANOUT

__all__ = ["MAX_CHAIN_DEPTH", "condition_matches", "fanout_limit", "outcome_text"]

#: Jobs chained one after another at most, counted from the first parent.
MAX_CHAIN_DEPTH = 10


def fanout_limit(specs: list[dict[str, Any]]) -> int:
    """How many children of one parent may fire: the smallest ``after.fanout`` they
    declare (``DEFAULT_FANOUT`` when none does)."""
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
