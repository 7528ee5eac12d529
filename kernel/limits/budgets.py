"""Run budgets: at most ``max_runs`` runs and ``max_units`` units per window.

A budget is a job's own (``"budget": {...}``, counted as ``job:<id>``) or a shared
one named by the job (``"budget": "NAME"``, defined in a job file's top-level
``budgets:`` section). Windows are fixed and aligned to the Unix epoch (a 1 d
window is each UTC day). A firing reserves one run and one unit when its
occurrence is made; beyond a limit it is skipped with reason ``budget``. The
reservation is settled with the occurrence: it stands when the occurrence ran
(with the units the run reported, when it reported them: a succeeded result
holding ``"budget_units": N``), and is released when the occurrence ended
without running (cancelled while waiting, approval rejected).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from kernel import statements as st
from kernel.db.limit_tables import budget_windows, budgets
from kernel.errors import InvalidArgument
from kernel.events import EventType
from kernel.spec.durations import text
from kernel.spec.sections import Budget
from kernel.transaction.tx import Tx
from kernel.transitions import door
from kernel.transitions.limits import (
    BUDGET_DEFINED,
    FIRING_OPENS_BUDGET_WINDOW,
    FIRING_RESERVES_BUDGET,
    RESERVATION_RECORDED,
    RESERVATION_RELEASED,
    RUN_SETTLES_RESERVATION_UNITS,
    RUN_SETTLES_WINDOW_UNITS,
    WINDOW_GIVES_BACK_RESERVATION,
)

__all__ = [
    "MAX_BUDGET",
    "REPORTED_UNITS_KEY",
    "Reservation",
    "reserve",
    "attach",
    "unreserve",
    "release",
    "settle_units",
    "set_budgets",
    "check_ref",
    "list_budgets",
]

MIN_WINDOW_S = 60.0
MAX_BUDGET = 1_000_000
_NAME = text(128)
#: The key of a succeeded result (a JSON object) that reports the units a run used.
REPORTED_UNITS_KEY = "budget_units"


@dataclass(frozen=True, slots=True)
class Reservation:
    budget: str
    window_start: int
    units: int


def _limits(tx: Tx, job_id: str, ref: dict[str, Any] | str) -> tuple[str, dict[str, Any]]:
    if isinstance(ref, dict):
        return f"job:{job_id}", ref
    row = tx.conn.execute(st.BUDGET_BY_NAME, {"name": ref}).first()
    if row is None:
        # A job naming a budget no file defined (or one removed since): nothing to count
        # against is not permission to run unbounded.
        return ref, {"window": MIN_WINDOW_S, "max_runs": 0, "max_units": 0}
    return ref, {"window": row.window_s, "max_runs": row.max_runs, "max_units": row.max_units}


def reserve(tx: Tx, job_id: str, ref: dict[str, Any] | str) -> Reservation | None:
    """Take one run and one unit from the current window; None when a limit is reached."""
    name, limits = _limits(tx, job_id, ref)
    window_ms = int(limits["window"] * 1000)
    window_start = tx.now - tx.now % window_ms
    key = {"budget_key": name, "window_key": window_start}
    door.run_count(tx, FIRING_OPENS_BUDGET_WINDOW, key)
    taken = door.run(
        tx,
        FIRING_RESERVES_BUDGET,
        {**key, "unit_count": 1, "max_runs": limits["max_runs"], "max_units": limits["max_units"]},
    )
    return Reservation(name, window_start, 1) if taken is not None else None


def attach(tx: Tx, occurrence_id: int, reservation: Reservation) -> None:
    """Record that occurrence ``occurrence_id`` holds ``reservation``."""
    door.run_count(
        tx,
        RESERVATION_RECORDED,
        {
            "occurrence_id": occurrence_id,
            "budget_key": reservation.budget,
            "window_key": reservation.window_start,
            "unit_count": reservation.units,
            "now": tx.now,
        },
    )


def unreserve(tx: Tx, reservation: Reservation) -> None:
    """Give back a reservation no occurrence took (the firing existed already)."""
    door.run_count(
        tx,
        WINDOW_GIVES_BACK_RESERVATION,
        {
            "budget_key": reservation.budget,
            "window_key": reservation.window_start,
            "unit_count": reservation.units,
        },
    )


def release(tx: Tx, occurrence_id: int, *, job_id: str) -> None:
    """The occurrence ended without running: its reservation (if any) stops counting."""
    released = door.run(tx, RESERVATION_RELEASED, {"of_occurrence": occurrence_id, "now": tx.now})
    if released is None:
        return
    unreserve(tx, Reservation(released.budget, released.window_start, released.units))
    tx.emit(
        EventType.BUDGET_RELEASED,
        job_id=job_id,
        occurrence_id=occurrence_id,
        budget=released.budget,
        window_start=released.window_start,
        units=released.units,
    )


def settle_units(tx: Tx, occurrence_id: int, result: Any) -> None:
    """Count the units a succeeded run reported (``{"budget_units": N}``), if it did."""
    if not isinstance(result, Mapping) or REPORTED_UNITS_KEY not in result:
        return
    units = result[REPORTED_UNITS_KEY]
    if isinstance(units, bool) or not isinstance(units, int) or not 0 <= units <= MAX_BUDGET:
        return  # not a count: the reserved unit stands
    door.run_count(
        tx, RUN_SETTLES_WINDOW_UNITS, {"occurrence_id": occurrence_id, "unit_count": units}
    )
    door.run(
        tx, RUN_SETTLES_RESERVATION_UNITS, {"of_occurrence": occurrence_id, "unit_count": units}
    )


def set_budgets(tx: Tx, defined: Mapping[str, Budget]) -> list[str]:
    """Create or update shared budgets (read by :func:`kernel.spec.jobspec.read_budget`)."""
    for name, read in defined.items():
        budget = read.to_dict()
        door.run_count(
            tx,
            BUDGET_DEFINED,
            {
                "budget_name": _NAME(name, f"budgets.{name}"),
                "window_length": budget["window"],
                "runs_limit": budget["max_runs"],
                "units_limit": budget["max_units"],
                "now": tx.now,
            },
        )
    return sorted(defined)


def check_ref(tx: Tx, job_id: str, ref: object) -> None:
    """Refuse a job naming a shared budget that no job file defined."""
    if isinstance(ref, str) and tx.conn.execute(st.BUDGET_BY_NAME, {"name": ref}).first() is None:
        raise InvalidArgument(
            "budget",
            f"job {job_id!r} names budget {ref!r}, which is not defined; define it in the "
            "job file's top-level budgets: section",
        )


def list_budgets(tx: Tx) -> list[dict[str, Any]]:
    """Every budget (shared ones with their limits) and the usage of its latest window."""
    w = budget_windows
    latest = (
        sa.select(w.c.budget, sa.func.max(w.c.window_start).label("window_start"))
        .group_by(w.c.budget)
        .subquery()
    )
    used = {
        r.budget: r
        for r in tx.conn.execute(
            sa.select(w).join(
                latest,
                sa.and_(w.c.budget == latest.c.budget, w.c.window_start == latest.c.window_start),
            )
        )
    }
    shared = {r.name: r for r in tx.conn.execute(sa.select(budgets))}
    listed = []
    for name in sorted(set(shared) | set(used)):
        limits, window = shared.get(name), used.get(name)
        listed.append(
            {
                "name": name,
                "shared": limits is not None,
                "window": limits.window_s if limits is not None else None,
                "max_runs": limits.max_runs if limits is not None else None,
                "max_units": limits.max_units if limits is not None else None,
                "window_start": window.window_start if window is not None else None,
                "runs": window.runs if window is not None else 0,
                "units": window.units if window is not None else 0,
            }
        )
    return listed
