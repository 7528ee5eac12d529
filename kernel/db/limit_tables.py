"""The tables of the kernel's limits: pools, rate limits and budgets (SQLAlchemy Core, on
:data:`kernel.db.schema.metadata`). Times are epoch milliseconds, as in :mod:`kernel.db.schema`.

pools
    A resource pool: ``limit`` occurrences of it may run at once; ``running`` counts
    those that do. A claim takes a slot (``running + 1`` only while ``running <
    limit``, one guarded statement) and every statement that ends a run gives it
    back, in the same transaction (revision 0006). A pool a job names but nothing
    defines gets a row with limit 1 at its first claim.
rate_limits
    A rate limit's token (revision 0022): ``name`` is ``task:<task>`` for a task's runs, else
    the job's id. A claim takes it only at or after ``next_free_at`` and sets it to now plus
    its run's interval (one guarded statement); a refused claim's occurrence waits until then.
budgets
    Shared budgets by name, as the job files' ``budgets:`` section sets them:
    ``window_s`` and the limits ``max_runs`` / ``max_units`` (NULL: unlimited).
budget_windows
    Usage of one budget in one fixed window (``window_start``: epoch ms, a multiple
    of the window). ``budget`` is a shared budget's name or ``job:<id>`` for a
    job's own. ``runs``/``units`` only grow by the guarded reserve (never past a
    limit) and shrink when a reservation is released.
budget_reservations
    What one occurrence took from its budget window; ``released_at`` is set when
    it ended without running (cancelled, rejected), its units given back.
"""

from __future__ import annotations

import sqlalchemy as sa

from kernel.db.checks import POOL_CHECKS
from kernel.db.schema import Ms, metadata

__all__ = ["pools", "rate_limits", "budgets", "budget_windows", "budget_reservations"]

pools = sa.Table(
    "pools",
    metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("limit", sa.Integer, nullable=False),
    sa.Column("running", sa.Integer, nullable=False, server_default="0"),
    *(sa.CheckConstraint(condition, name=name) for name, condition in POOL_CHECKS),
)

budgets = sa.Table(
    "budgets",
    metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("window_s", sa.Float, nullable=False),
    sa.Column("max_runs", sa.Integer),
    sa.Column("max_units", sa.Integer),
    sa.Column("updated_at", Ms, nullable=False),
)

budget_windows = sa.Table(
    "budget_windows",
    metadata,
    sa.Column("budget", sa.String(140), primary_key=True),
    sa.Column("window_start", Ms, primary_key=True),
    sa.Column("runs", sa.Integer, nullable=False),
    sa.Column("units", sa.BigInteger, nullable=False),
    sa.CheckConstraint("runs >= 0 AND units >= 0", name="ck_budget_windows_counters"),
)

budget_reservations = sa.Table(
    "budget_reservations",
    metadata,
    sa.Column("occurrence_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("budget", sa.String(140), nullable=False),
    sa.Column("window_start", Ms, nullable=False),
    sa.Column("units", sa.BigInteger, nullable=False),
    sa.Column("reserved_at", Ms, nullable=False),
    sa.Column("released_at", Ms),
)

rate_limits = sa.Table(
    "rate_limits",
    metadata,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("next_free_at", Ms, nullable=False),
)
