"""What a claim takes from the limits its run counts against, before it takes the run: a
pool slot and a rate limit's token, each by one guarded statement, given back when the
claim does not take the run after all."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernel.limits import pools
from kernel.records import loads
from kernel.spec.durations import rate_interval_ms
from kernel.transaction.tx import Tx
from kernel.transitions import door
from kernel.transitions.limits import CLAIM_GIVES_BACK_RATE_TOKEN, CLAIM_TAKES_RATE_TOKEN

__all__ = ["Held", "take"]


@dataclass(frozen=True, slots=True)
class Held:
    """A claim's pool slot (``pool``) and rate token (``rate_limit``, taken until
    ``until``); None: it took none."""

    pool: str | None = None
    rate_limit: str | None = None
    until: int = 0

    def give_back(self, tx: Tx) -> None:
        """The claim did not take the run: the slot and the token are free again."""
        pools.give_back(tx, self.pool)
        if self.rate_limit is not None:
            params = {"rate_limit": self.rate_limit, "until": self.until, "now": tx.now}
            door.run_count(tx, CLAIM_GIVES_BACK_RATE_TOKEN, params)


def take(tx: Tx, o: Mapping[str, Any], reclaiming: bool) -> Held | None:
    """The pool slot and rate token a claim of the occurrence row ``o`` needs; None (nothing
    held) when its pool is full or its rate limit's token is not free yet. A reclaim takes
    neither: it runs in the slot, and under the token, its expired run took."""
    if reclaiming:
        return Held()
    pool = o["pool"]
    if pool is not None and not pools.take_slot(tx, pool):
        return None
    held = Held(pool)
    if o["rate_limit"] is None:
        return held
    until = tx.now + _interval_ms(o["definition"])
    params = {"rate_limit": o["rate_limit"], "until": until, "now": tx.now}
    if door.run(tx, CLAIM_TAKES_RATE_TOKEN, params) is None:
        held.give_back(tx)
        return None
    return Held(pool, o["rate_limit"], until)


@functools.lru_cache(maxsize=256)
def _interval_ms(definition: str) -> int:
    """The snapshot's rate limit as the least time between two runs, parsed once per
    snapshot text."""
    return rate_interval_ms(loads(definition)["rate_limit"])
