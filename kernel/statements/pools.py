"""A pool's slots: taken by a claim, given back by whatever ends the run; and a rate
limit's token, taken by a claim.

The limit is enforced by the data: ``running`` grows only while it is below
``limit``, decided in the statement under the pool row's lock, so two claimers on
PostgreSQL cannot both take the last slot (the second waits for the first's row
and then sees its count). A rate limit's ``next_free_at`` moves only when it has come,
under the same lock, so two claimers cannot both take one token.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import bindparam as p
from sqlalchemy.dialects import postgresql, sqlite

from kernel.db.limit_tables import pools, rate_limits
from kernel.db.schema import occurrences
from kernel.statements.predicates import status_is
from kernel.states import CLAIMABLE

__all__ = [
    "DEFAULT_POOL_LIMIT",
    "TAKE_POOL_SLOT",
    "GIVE_BACK_POOL_SLOT",
    "SET_POOL_LIMIT",
    "POOLS",
    "POOL_BY_NAME",
    "WAITING_IN_POOLS",
    "WAITING_IN_POOL",
    "ROOM_IN_POOL",
    "DRIFTED_POOLS",
    "RECONCILE_POOL",
    "TAKE_RATE_TOKEN",
    "GIVE_BACK_RATE_TOKEN",
    "RATE_FREE_AT",
    "rate_token_free",
]

#: The default limit of a pool a job names and nothing defines (SPEC §6).
DEFAULT_POOL_LIMIT = 1


def _take_slot(insert: Any) -> Any:
    """One more running occurrence of the pool, if it has room: zero rows when full.
    An undefined pool is created here at its default limit, with this slot taken."""
    statement = insert(pools).values(name=p("pool"), limit=DEFAULT_POOL_LIMIT, running=1)
    return statement.on_conflict_do_update(
        index_elements=[pools.c.name],
        set_={"running": pools.c.running + 1},
        where=pools.c.running < pools.c.limit,
    ).returning(pools.c.running)


TAKE_POOL_SLOT = {"postgresql": _take_slot(postgresql.insert), "sqlite": _take_slot(sqlite.insert)}

#: A run of the pool ended (settled, released, expired). Never below zero: a
#: counter the CHECK refused would stop every settle of the pool.
GIVE_BACK_POOL_SLOT = (
    sa.update(pools)
    .where(pools.c.name == p("pool"), pools.c.running > 0)
    .values(running=pools.c.running - 1)
)


def _set_limit(insert: Any) -> Any:
    """Define a pool or change its limit; zero rows when it already has this limit."""
    statement = insert(pools).values(name=p("pool"), limit=p("limit"), running=0)
    return statement.on_conflict_do_update(
        index_elements=[pools.c.name],
        set_={"limit": statement.excluded.limit},
        where=pools.c.limit != statement.excluded.limit,
    ).returning(pools.c.running)


SET_POOL_LIMIT = {"postgresql": _set_limit(postgresql.insert), "sqlite": _set_limit(sqlite.insert)}

POOLS = sa.select(pools.c.name, pools.c.limit, pools.c.running).order_by(pools.c.name)
POOL_BY_NAME = POOLS.where(pools.c.name == p("pool"))


#: Waiting to run, the statuses written into the text: SQLite then counts through the
#: partial index of claimable rows, where a bound status made it scan all of history
#: (the exporter's scrape: 142 ms at 500k settled occurrences, bench/README.md session 21).
_WAITING = status_is(*(s.value for s in CLAIMABLE))
#: Occurrences waiting to run, per pool (pools no row defines yet included).
WAITING_IN_POOLS = (
    sa.select(occurrences.c.pool, sa.func.count().label("waiting"))
    .where(occurrences.c.pool.is_not(None), _WAITING)
    .group_by(occurrences.c.pool)
)
WAITING_IN_POOL = sa.select(sa.func.count()).where(occurrences.c.pool == p("pool"), _WAITING)

#: The occurrence is in no pool, or its pool has a free slot: a filter for what to
#: hint and which candidates to try (TAKE_POOL_SLOT is the guard), so a full pool's
#: backlog neither fills the pump's batches nor hides claimable work behind it.
ROOM_IN_POOL = sa.or_(
    occurrences.c.pool.is_(None),
    ~sa.exists().where(pools.c.name == occurrences.c.pool, pools.c.running >= pools.c.limit),
)

#: Runs that really hold a slot of the pool: its running occurrences.
_HELD = (
    sa.select(sa.func.count())
    .where(occurrences.c.pool == pools.c.name, occurrences.c.status == sa.literal("running"))
    .scalar_subquery()
)
#: Pools whose counter differs from the slots their runs hold: candidates for
#: RECONCILE_POOL, which decides again.
DRIFTED_POOLS = (
    sa.select(pools.c.name, pools.c.running).where(pools.c.running != _HELD).order_by(pools.c.name)
)
#: Set a pool's counter to the slots its runs hold, if it still reads ``was`` (a claim or
#: a run's end since the read changed it, and the next pass looks again) and differs.
RECONCILE_POOL = (
    sa.update(pools)
    .where(pools.c.name == p("pool"), pools.c.running == p("was"), pools.c.running != _HELD)
    .values(running=_HELD)
    .returning(pools.c.running)
)


def _take_token(insert: Any) -> Any:
    """The rate limit's token, if it is free at ``now``: its next one is free at ``until``
    (now + the run's interval); zero rows when it is not free yet. A limit with no row
    yet is made here, this token taken."""
    statement = insert(rate_limits).values(name=p("rate_limit"), next_free_at=p("until"))
    return statement.on_conflict_do_update(
        index_elements=[rate_limits.c.name],
        set_={"next_free_at": statement.excluded.next_free_at},
        where=rate_limits.c.next_free_at <= p("now"),
    ).returning(rate_limits.c.next_free_at)


TAKE_RATE_TOKEN = {
    "postgresql": _take_token(postgresql.insert),
    "sqlite": _take_token(sqlite.insert),
}

#: A claim that took the token failed after all: the token is free again, unless another
#: claim took it since.
GIVE_BACK_RATE_TOKEN = (
    sa.update(rate_limits)
    .where(rate_limits.c.name == p("rate_limit"), rate_limits.c.next_free_at == p("until"))
    .values(next_free_at=p("now"))
)

#: When the occurrence's rate limit has its next token (NULL: no limit, or never taken).
RATE_FREE_AT = (
    sa.select(rate_limits.c.next_free_at)
    .where(rate_limits.c.name == occurrences.c.rate_limit)
    .scalar_subquery()
)


def rate_token_free(now: Any) -> sa.ColumnElement[bool]:
    """The occurrence has no rate limit, or its limit's token is free at ``now``: a filter
    for what to hint and which candidates to try (TAKE_RATE_TOKEN is the guard)."""
    return sa.or_(
        occurrences.c.rate_limit.is_(None),
        ~sa.exists().where(
            rate_limits.c.name == occurrences.c.rate_limit, rate_limits.c.next_free_at > now
        ),
    )
