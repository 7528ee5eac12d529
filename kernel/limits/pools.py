"""Resource pools: their limits, and the slot a claim takes and a run's end gives back."""

from __future__ import annotations

from kernel import statements as st
from kernel.events import EventType
from kernel.spec.sections import check_limit
from kernel.transaction.tx import Tx
from kernel.transitions import door
from kernel.transitions.limits import (
    CLAIM_TAKES_POOL_SLOT,
    OPERATOR_SETS_POOL_LIMIT,
    RUN_GIVES_BACK_POOL_SLOT,
    UPKEEP_RECONCILES_POOL,
)
from kernel.types import Pool

__all__ = ["take_slot", "give_back", "set_limit", "list_pools", "reconcile"]


def take_slot(tx: Tx, pool: str) -> bool:
    """Take one running slot of ``pool``; False (nothing changed) when it is full."""
    return door.run(tx, CLAIM_TAKES_POOL_SLOT, {"pool": pool}) is not None


def give_back(tx: Tx, pool: str | None) -> None:
    """A run of ``pool`` ended (None: the occurrence is in no pool)."""
    if pool is not None:
        door.run_count(tx, RUN_GIVES_BACK_POOL_SLOT, {"pool": pool})


def set_limit(tx: Tx, name: str, limit: int) -> tuple[Pool, bool]:
    """Define ``name`` with ``limit``, or change it; ``changed`` is false when it had it.

    Lowering a limit below the number running stops nothing: claims of the pool
    wait until enough of its runs end.
    """
    check_limit(name, limit)
    if door.run(tx, OPERATOR_SETS_POOL_LIMIT, {"pool": name, "limit": limit}) is not None:
        tx.emit(EventType.POOL_LIMIT_SET, pool=name, limit=limit)
        return _pool(tx, name), True
    return _pool(tx, name), False


def list_pools(tx: Tx) -> list[Pool]:
    """Every defined pool, and every pool waiting occurrences name without a row."""
    waiting: dict[str, int] = {r.pool: r.waiting for r in tx.conn.execute(st.WAITING_IN_POOLS)}
    found = [
        Pool(r.name, r.limit, r.running, waiting.pop(r.name, 0)) for r in tx.conn.execute(st.POOLS)
    ]
    found += [Pool(name, st.DEFAULT_POOL_LIMIT, 0, n, defined=False) for name, n in waiting.items()]
    return sorted(found, key=lambda pool: pool.name)


def reconcile(tx: Tx) -> list[dict[str, object]]:
    """Set each pool's counter to the slots its running occurrences hold, where they
    differ (a give-back that never happened); event ``pool_reconciled`` for each.

    Returns:
        ``{"pool", "was", "running"}`` for each pool corrected.
    """
    corrected: list[dict[str, object]] = []
    for name, was in tx.conn.execute(st.DRIFTED_POOLS).all():
        reconciled = door.run(tx, UPKEEP_RECONCILES_POOL, {"pool": name, "was": was})
        if reconciled is not None:
            running = reconciled.running
            tx.emit(EventType.POOL_RECONCILED, pool=name, was=was, running=running)
            corrected.append({"pool": name, "was": was, "running": running})
    return corrected


def _pool(tx: Tx, name: str) -> Pool:
    row = tx.conn.execute(st.POOL_BY_NAME, {"pool": name}).one()
    waiting = tx.conn.execute(st.WAITING_IN_POOL, {"pool": name}).scalar_one()
    return Pool(row.name, row.limit, row.running, waiting)
