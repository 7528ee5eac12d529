"""Beat's statements: materialise an occurrence (also run-now's and a chain's), mark
occurrences hinted, and keep the registry of Beats (a heartbeat, a clean deregistration,
forgetting the silent)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import bindparam as p
from sqlalchemy.dialects import postgresql, sqlite

from kernel.db.driver import DriverStatement
from kernel.db.schema import beats, occurrences
from kernel.statements.claims import JOB_ALLOWS_CLAIM, NO_UNRESOLVED_RUN
from kernel.statements.pools import ROOM_IN_POOL, rate_token_free
from kernel.statements.predicates import NOT_PAUSED, claimable_now, lease_expired

__all__ = [
    "CREATE_OCCURRENCE",
    "HINT",
    "HINT_MADE",
    "MARK_HINTED",
    "TOUCH_BEAT",
    "REGISTER_BEAT",
    "DEREGISTER_BEAT",
    "FORGET_SILENT_BEATS",
]

#: What a new occurrence is given; the rest (lease, results, dispatch) starts NULL.
_COLUMNS = (
    "job_id",
    "job_revision",
    "trigger_key",
    "idempotency_key",
    "scheduled_for",
    "status",
    "attempt",
    "max_attempts",
    "max_lost_leases",
    "fence",
    "available_at",
    "expires_at",
    "queue",
    "kind",
    "delivery",
    "exclusive",
    "pool",
    "priority",
    "rate_limit",
    "definition",
    "skip_reason",
    "cancel_requested",
    "parent_id",
    "chain_depth",
    "created_at",
    "updated_at",
    "settled_at",
)


def _create(insert: Any) -> Any:
    """Insert unless the firing exists: the unique (job, trigger key) decides, not a
    prior read; zero rows when it exists."""
    return (
        insert(occurrences)
        .values({name: p(name) for name in _COLUMNS})
        .on_conflict_do_nothing()
        .returning(occurrences.c.id)
    )


CREATE_OCCURRENCE = {"postgresql": _create(postgresql.insert), "sqlite": _create(sqlite.insert)}

#: The occurrences ``ids`` were hinted (published) now.
MARK_HINTED = (
    sa.update(occurrences)
    .where(occurrences.c.id.in_(p("ids", expanding=True)))
    .values(dispatched_at=p("now"))
)


OCC = occurrences
_running = OCC.alias("running")
#: Not hinted since ``rehint_before`` (``now`` less the pump's rehint interval).
_not_recent = sa.or_(OCC.c.dispatched_at.is_(None), OCC.c.dispatched_at <= p("rehint_before"))
_waiting = sa.and_(
    claimable_now(p("now")),
    # An exclusive occurrence (overlap queue/replace) cannot start while another of
    # its job runs; hinting it would only make a worker refuse it.
    sa.or_(
        OCC.c.exclusive.is_(False),
        ~sa.exists().where(_running.c.job_id == OCC.c.job_id, _running.c.status == "running"),
    ),
    ROOM_IN_POOL,
    # A rate-limited run is hinted when its token is free, not to be refused before.
    rate_token_free(p("now")),
    NO_UNRESOLVED_RUN,
    _not_recent,
)
_expired = sa.and_(
    lease_expired(p("now")),
    OCC.c.delivery == "at-least-once",
    NOT_PAUSED,
    # The last hint led to the claim whose lease just expired: hint again at once.
    sa.or_(_not_recent, OCC.c.dispatched_at < OCC.c.lease_expires_at),
)


def _candidates(condition: Any, dialect: str, rank: int) -> sa.Select[Any]:
    """The ids of up to ``limit`` occurrences meeting ``condition``, in claim order,
    locked on PostgreSQL (a second pump skips them), each with ``rank``."""
    query = (
        sa.select(OCC.c.id)
        .where(condition, OCC.c.cancel_requested.is_(False), JOB_ALLOWS_CLAIM)
        # An enqueue's priority orders the claims the hints lead to (0 otherwise).
        .order_by(OCC.c.priority.desc(), OCC.c.available_at, OCC.c.id)
        .limit(p("limit", type_=sa.Integer))
    )
    if dialect == "postgresql":
        query = query.with_for_update(skip_locked=True, of=OCC)
    found = query.subquery()
    return sa.select(found.c.id, sa.literal(rank, sa.Integer).label("rank"))


def _hinted(chosen: Any) -> Any:
    """Mark the ``chosen`` ids hinted now, answering what a hint is built from."""
    return (
        sa.update(OCC)
        .where(OCC.c.id.in_(chosen))
        .values(dispatched_at=p("now"))
        .returning(
            OCC.c.id,
            OCC.c.job_id,
            OCC.c.queue,
            OCC.c.kind,
            OCC.c.definition,
            OCC.c.status,
            OCC.c.priority,
            OCC.c.available_at,
            OCC.c.trigger_key,
        )
    )


def _hint(dialect: str) -> Any:
    picked = sa.union_all(
        _candidates(_waiting, dialect, 0), _candidates(_expired, dialect, 1)
    ).subquery("picked")
    return _hinted(
        sa.select(picked.c.id).order_by(picked.c.rank).limit(p("limit", type_=sa.Integer))
    )


#: What the pump hints, marked hinted in the same statement (one round trip): up to
#: ``limit`` claimable occurrences (``waiting``), then expired leases Beat will not
#: settle; none hinted since ``rehint_before``. The rows come back in no order.
HINT = {dialect: DriverStatement(_hint(dialect), dialect) for dialect in ("postgresql", "sqlite")}

#: Of the runs ``ids`` this transaction made (a settle's links), those the pump would hint
#: now, marked hinted: their maker publishes them once it commits (``rehint_before`` is
#: ``now``: they are new).
HINT_MADE = _hinted(
    sa.select(OCC.c.id).where(
        OCC.c.id.in_(p("ids", expanding=True)),
        _waiting,
        OCC.c.cancel_requested.is_(False),
        JOB_ALLOWS_CLAIM,
    )
)


# -- the registry of Beats ---------------------------------------------------------------

#: A registered Beat ticked: zero rows when it is not registered (REGISTER_BEAT then).
TOUCH_BEAT = (
    sa.update(beats)
    .where(beats.c.id == p("beat_id"))
    .values(last_tick_at=p("now"), interval_s=p("interval_s"), host=p("host"))
)


def _register(insert: Any) -> Any:
    """A Beat's first tick; a concurrent first tick of the same id already registered it."""
    return (
        insert(beats)
        .values(
            id=p("beat_id"),
            host=p("host"),
            interval_s=p("interval_s"),
            started_at=p("now"),
            last_tick_at=p("now"),
        )
        .on_conflict_do_nothing()
    )


REGISTER_BEAT = {"postgresql": _register(postgresql.insert), "sqlite": _register(sqlite.insert)}

#: A Beat that stops cleanly; zero rows when it was not registered.
DEREGISTER_BEAT = sa.delete(beats).where(beats.c.id == p("beat_id")).returning(beats.c.host)

#: Beats whose last tick is before ``silent_since``.
FORGET_SILENT_BEATS = (
    sa.delete(beats)
    .where(beats.c.last_tick_at < p("silent_since"))
    .returning(beats.c.id, beats.c.host, beats.c.last_tick_at)
)
