"""Statements of the gates a firing passes: the approval hold, the run budget and the start
deadline (``expires``).

Each decision is the guard of one statement: an approval is decided by the
status still being ``awaiting_approval``, a budget reservation by the window's
counters still being under the limits when the UPDATE writes (on PostgreSQL the
row lock makes a second reserver re-check them against the first one's commit).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import bindparam as p
from sqlalchemy.dialects import postgresql, sqlite

from kernel.db.limit_tables import budget_reservations, budget_windows, budgets
from kernel.db.schema import jobs, occurrences
from kernel.statements.predicates import OF_OCCURRENCE, start_expired

__all__ = [
    "LOCK_JOB",
    "AWAITING_IN_JOB",
    "APPROVE",
    "REJECT",
    "APPLY_APPROVAL_TIMEOUTS",
    "SKIP_EXPIRED",
    "OPEN_BUDGET_WINDOW",
    "RESERVE_BUDGET",
    "RECORD_RESERVATION",
    "RELEASE_RESERVATION",
    "GIVE_BACK_BUDGET",
    "SETTLE_WINDOW_UNITS",
    "SETTLE_RESERVATION_UNITS",
    "SET_BUDGET",
    "BUDGET_BY_NAME",
    "PRUNE_ENDED_WINDOWS",
]

OCC = occurrences
RES = budget_reservations
WIN = budget_windows
_AWAITING = "awaiting_approval"


def _per_dialect(build: Any) -> dict[str, Any]:
    return {"postgresql": build(postgresql.insert), "sqlite": build(sqlite.insert)}


#: Serialises the approval-gated firings of one job on PostgreSQL (a chained firing
#: and a Beat's firing of the same job), so ``max_pending`` counts what is committed.
LOCK_JOB = sa.select(jobs.c.id).where(jobs.c.id == p("job_id")).with_for_update()

AWAITING_IN_JOB = sa.select(sa.func.count()).where(
    OCC.c.job_id == p("job_id"), OCC.c.status == _AWAITING
)

#: An operator approves: the occurrence becomes queued (and the pump hints it).
APPROVE = (
    sa.update(OCC)
    .where(OCC.c.id == p("occurrence_id"), OCC.c.status == _AWAITING)
    .values(
        status="queued",
        available_at=p("now"),
        approval_due_at=None,
        updated_at=p("now"),
    )
    .returning(OCC.c.job_id, OCC.c.fence)
)

#: An operator rejects: the firing is recorded as not run (skipped, with the reason).
REJECT = (
    sa.update(OCC)
    .where(OCC.c.id == p("occurrence_id"), OCC.c.status == _AWAITING)
    .values(
        status="skipped",
        skip_reason=p("reason"),
        approval_due_at=None,
        settled_at=p("now"),
        updated_at=p("now"),
    )
    .returning(OCC.c.job_id, OCC.c.fence)
)

_approve_on_timeout = OCC.c.approval_auto == "approve"
_due = sa.and_(OCC.c.status == _AWAITING, OCC.c.approval_due_at <= p("now"))

#: Beat applies each overdue occurrence's auto action, oldest due first, at most
#: ``limit``; the outer guard re-checks what the (PostgreSQL: skip-locked) batch picked.
APPLY_APPROVAL_TIMEOUTS = (
    sa.update(OCC)
    .where(
        _due,
        OCC.c.id.in_(
            sa.select(OCC.c.id)
            .where(_due)
            .order_by(OCC.c.approval_due_at)
            .limit(p("limit"))
            .with_for_update(skip_locked=True)
            .scalar_subquery()
        ),
    )
    .values(
        status=sa.case((_approve_on_timeout, "queued"), else_="skipped"),
        skip_reason=sa.case((_approve_on_timeout, None), else_="approval_timeout"),
        settled_at=sa.case((_approve_on_timeout, None), else_=p("now")),
        available_at=p("now"),
        approval_due_at=None,
        updated_at=p("now"),
    )
    .returning(OCC.c.id, OCC.c.job_id, OCC.c.fence, OCC.c.status)
)

_expired = start_expired(p("now"))
#: NULL: every expired occurrence (Beat's sweep); else only that one (a claim met it).
_which = sa.or_(
    sa.cast(p("occurrence_id"), sa.BigInteger).is_(None), OCC.c.id == p("occurrence_id")
)

#: Skip expired occurrences, the earliest deadline first, at most ``limit``. Whoever meets
#: one (a claim, Beat's upkeep) runs this; the outer guard decides again on the row as it
#: is when written, so of a claim and the sweep racing exactly one settles it (PostgreSQL:
#: the batch skips a row a claim holds locked, and a claim that waited reads it settled).
SKIP_EXPIRED = (
    sa.update(OCC)
    .where(
        _expired,
        OCC.c.id.in_(
            sa.select(OCC.c.id)
            .where(_expired, _which)
            .order_by(OCC.c.expires_at, OCC.c.id)
            .limit(p("limit"))
            .with_for_update(skip_locked=True)
            .scalar_subquery()
        ),
    )
    .values(status="skipped", skip_reason="expired", settled_at=p("now"), updated_at=p("now"))
    .returning(
        OCC.c.id,
        OCC.c.job_id,
        OCC.c.fence,
        OCC.c.attempt,
        OCC.c.expires_at,
        OCC.c.links,
        OCC.c.trigger_key,
    )
)

OPEN_BUDGET_WINDOW = _per_dialect(
    lambda insert: (
        insert(WIN)
        .values(budget=p("budget_key"), window_start=p("window_key"), runs=0, units=0)
        .on_conflict_do_nothing(index_elements=[WIN.c.budget, WIN.c.window_start])
    )
)


def _unlimited_or(name: str, within: Any) -> Any:
    return sa.or_(sa.cast(p(name), sa.Integer).is_(None), within)


#: Take one run and ``units`` from the window unless that passes a limit (NULL: none).
RESERVE_BUDGET = (
    sa.update(WIN)
    .where(
        WIN.c.budget == p("budget_key"),
        WIN.c.window_start == p("window_key"),
        _unlimited_or("max_runs", WIN.c.runs + 1 <= sa.cast(p("max_runs"), sa.Integer)),
        _unlimited_or(
            "max_units", WIN.c.units + p("unit_count") <= sa.cast(p("max_units"), sa.Integer)
        ),
    )
    .values(runs=WIN.c.runs + 1, units=WIN.c.units + p("unit_count"))
    .returning(WIN.c.runs, WIN.c.units)
)

RECORD_RESERVATION = sa.insert(RES).values(
    occurrence_id=p("occurrence_id"),
    budget=p("budget_key"),
    window_start=p("window_key"),
    units=p("unit_count"),
    reserved_at=p("now"),
    released_at=None,
)

#: Once per reservation: the occurrence ended without running.
RELEASE_RESERVATION = (
    sa.update(RES)
    .where(RES.c.occurrence_id == p(OF_OCCURRENCE), RES.c.released_at.is_(None))
    .values(released_at=p("now"))
    .returning(RES.c.budget, RES.c.window_start, RES.c.units)
)

GIVE_BACK_BUDGET = (
    sa.update(WIN)
    .where(WIN.c.budget == p("budget_key"), WIN.c.window_start == p("window_key"))
    .values(runs=WIN.c.runs - 1, units=WIN.c.units - p("unit_count"))
)

_reserved_units = (
    sa.select(RES.c.units)
    .where(RES.c.occurrence_id == p("occurrence_id"), RES.c.released_at.is_(None))
    .scalar_subquery()
)

#: A run reported the units it used: the window counts those instead of the reserved
#: ones (it may pass ``max_units`` now; later firings are then refused). Run before
#: SETTLE_RESERVATION_UNITS, which it reads.
SETTLE_WINDOW_UNITS = (
    sa.update(WIN)
    .where(
        sa.tuple_(WIN.c.budget, WIN.c.window_start).in_(
            sa.select(RES.c.budget, RES.c.window_start).where(
                RES.c.occurrence_id == p("occurrence_id"), RES.c.released_at.is_(None)
            )
        )
    )
    .values(units=WIN.c.units - _reserved_units + p("unit_count"))
)

SETTLE_RESERVATION_UNITS = (
    sa.update(RES)
    .where(RES.c.occurrence_id == p(OF_OCCURRENCE), RES.c.released_at.is_(None))
    .values(units=p("unit_count"))
    .returning(RES.c.budget)
)


def _set_budget(insert: Any) -> Any:
    statement = insert(budgets).values(
        name=p("budget_name"),
        window_s=p("window_length"),
        max_runs=p("runs_limit"),
        max_units=p("units_limit"),
        updated_at=p("now"),
    )
    excluded = statement.excluded
    return statement.on_conflict_do_update(
        index_elements=[budgets.c.name],
        set_={
            "window_s": excluded.window_s,
            "max_runs": excluded.max_runs,
            "max_units": excluded.max_units,
            "updated_at": excluded.updated_at,
        },
    )


#: A shared budget as the job file defines it (its windows' usage stays).
SET_BUDGET = _per_dialect(_set_budget)

BUDGET_BY_NAME = sa.select(budgets).where(budgets.c.name == p("name"))

#: Budget windows that began before ``cutoff`` (at most ``limit`` of them).
PRUNE_ENDED_WINDOWS = sa.delete(budget_windows).where(
    sa.tuple_(budget_windows.c.budget, budget_windows.c.window_start).in_(
        sa.select(budget_windows.c.budget, budget_windows.c.window_start)
        .where(budget_windows.c.window_start < p("cutoff"))
        .limit(p("limit"))
    )
)
