"""A claim's statements: the read it decides from, and the compare-and-set that takes the run.

Built once and run on the driver (kernel.db.driver.DriverStatement) where they are on
every task's path (why: kernel/statements/worker.py).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import bindparam as p

from kernel.db.clock import StatementNow
from kernel.db.driver import DriverStatement
from kernel.db.json_text import json_object
from kernel.db.schema import controls, jobs, occurrences, requeue_grants
from kernel.events import EventType
from kernel.records import OCCURRENCE_COLUMNS
from kernel.statements.logged import logged
from kernel.statements.predicates import (
    ATTEMPTS_LEFT,
    LOST_LEASES_LEFT,
    claimable_now,
    deadline_passed,
    lease_expired,
)
from kernel.statements.settles import PLAIN_SUCCESS, PLAIN_SUCCESS_LOGGED

__all__ = [
    "OCCURRENCE_FOR_CLAIM",
    "UNCLAIMED_GRANT",
    "JOB_ALLOWS_CLAIM",
    "CLAIM",
    "CLAIM_AND_LOG",
    "CLAIM_BY_DIALECT",
    "CLAIM_QUEUED_BY_DIALECT",
    "SUCCEED_AND_CLAIM_QUEUED",
    "USE_GRANT",
    "BLOCKING_IN_JOB",
    "blocking_in_job",
    "NO_UNRESOLVED_RUN",
]

OCC = occurrences
CTL = controls

#: A claim's one read: the occurrence, its control's state (NULL: no control row) and
#: the transaction's instant (``now``: the server's clock on PostgreSQL, no round trip of
#: its own).
#: On PostgreSQL it locks the row, so what the claim decides from it (attempt spent or
#: free, grant used, expiry settled) is what holds when CLAIM writes: a concurrent
#: adjudicate or cancel is waited for, not overtaken. (SQLite: BEGIN IMMEDIATE already.)
OCCURRENCE_FOR_CLAIM = DriverStatement(
    sa.select(
        OCC,
        CTL.c.state.label("control_state"),
        StatementNow().label("now"),
        # What the claim decides from, as every statement decides it (predicates).
        lease_expired(StatementNow()).label("lease_expired"),
        # Paused or not (the control is in this FROM): SKIP_EXPIRED decides the rest.
        deadline_passed(StatementNow()).label("deadline_passed"),
        ATTEMPTS_LEFT.label("attempts_left"),
        LOST_LEASES_LEFT.label("lost_leases_left"),
    )
    .select_from(OCC.outerjoin(CTL, CTL.c.occurrence_id == OCC.c.id))
    .where(OCC.c.id == p("occurrence_id"))
    .with_for_update(of=OCC)
)

#: A requeue grant not yet used by a claim, valid for the fence it was made on.
UNCLAIMED_GRANT = (
    sa.select(requeue_grants.c.request_id)
    .where(
        requeue_grants.c.occurrence_id == p("occurrence_id"),
        requeue_grants.c.claimed_at.is_(None),
        requeue_grants.c.expected_fence == p("fence"),
    )
    .order_by(requeue_grants.c.created_at)
    .limit(1)
)

#: Claimable now, or an at-least-once run whose lease expired with lost leases left (a
#: reclaim).
_claimable_or_reclaimable = sa.or_(
    claimable_now(p("now")),
    sa.and_(lease_expired(p("now")), OCC.c.delivery == "at-least-once", LOST_LEASES_LEFT),
)

#: A disabled job's occurrences wait (seed semantics) except manual ones: a run-now
#: works for a disabled job (SPEC §6), retries of it included; and those of a job its
#: schedule retired (its last firings run: the job was not stopped, it ran out).
#: The patterns are SQL literals, not binds: SQLite re-prepares a statement whose LIKE
#: pattern is a bound parameter at every run (its LIKE optimisation plans for the
#: value), which cost the claim three times its UPDATE (bench/README.md).
JOB_ALLOWS_CLAIM = sa.or_(
    OCC.c.trigger_key.like(sa.literal_column("'manual:%'")),
    # A one-shot job is disabled by its own firing (kernel.jobs.definitions.fire); that firing runs.
    OCC.c.trigger_key.like(sa.literal_column("'at:%'")),
    sa.exists().where(jobs.c.id == OCC.c.job_id, jobs.c.enabled | jobs.c.schedule_spent),
)

#: Claim by compare-and-set on what the claimer decided from: the fence, status and
#: control state it read (a hand back or an adjudication in between changes how the
#: attempt counts, so the claim must be decided again).
_claim = (
    sa.update(OCC)
    .where(
        OCC.c.id == p("occurrence_id"),
        OCC.c.fence == p("seen_fence"),
        OCC.c.status == p("seen_status"),
        OCC.c.attempt == p("seen_attempt"),
        sa.func.coalesce(
            sa.select(CTL.c.state).where(CTL.c.occurrence_id == OCC.c.id).scalar_subquery(),
            "",
        )
        == p("seen_control_state"),
        OCC.c.cancel_requested.is_(False),
        _claimable_or_reclaimable,
        JOB_ALLOWS_CLAIM,
    )
    .values(
        status="running",
        fence=OCC.c.fence + 1,
        attempt=OCC.c.attempt + p("attempt_inc"),
        # A reclaim (the row still running, its lease expired) counts a lost lease.
        lost_leases=OCC.c.lost_leases + sa.case((OCC.c.status == "running", 1), else_=0),
        lease_owner=p("owner"),
        lease_expires_at=p("lease_until"),
        updated_at=p("now"),
        settled_at=None,
    )
    .returning(*OCC.c)
)
CLAIM = DriverStatement(_claim)

#: CLAIM and its ``occurrence_claimed`` event in one statement (PostgreSQL: a
#: data-modifying CTE), one round trip less per claim; the event's data is built by
#: the caller from what CLAIM compares (the attempt it writes is seen + increment).
_claimed = _claim.cte("claimed")
_claim_logged = logged(
    p("now", type_=sa.BigInteger),
    sa.literal(EventType.OCCURRENCE_CLAIMED.value),
    _claimed.c.job_id,
    _claimed.c.id,
    _claimed.c.fence,
    p("event_data", type_=sa.Text),
).cte("claim_logged")
CLAIM_AND_LOG = DriverStatement(sa.select(_claimed).add_cte(_claim_logged))
#: The claim a worker runs on each back end: PostgreSQL writes its event in the same
#: statement; SQLite (no data-modifying CTE) appends it after.
CLAIM_BY_DIALECT = {"postgresql": CLAIM_AND_LOG, "sqlite": CLAIM}

#: The lease of the occurrence's own snapshot in ms, as ``int(float(lease) * 1000)``.
_SNAPSHOT_LEASE_MS = {
    "postgresql": sa.literal_column(
        "CAST(FLOOR(CAST(CAST(occurrences.definition AS JSON) ->> 'lease' AS DOUBLE PRECISION)"
        " * 1000) AS BIGINT)",
        sa.BigInteger,
    ),
    "sqlite": sa.literal_column(
        "CAST(json_extract(occurrences.definition, '$.lease') * 1000 AS INTEGER)", sa.BigInteger
    ),
}


def _claim_queued(dialect: str, occurrence_param: str = "occurrence_id") -> sa.Update:
    """The common claim decided whole in one statement, with no read before it: a queued
    occurrence that never held a lease, with attempts left, no control, no pool, neither
    exclusive nor at-most-once, no rate limit (claiming.claim decides every other case
    from a read).
    The lease is the caller's (``lease_ms``) or the snapshot's; ``now`` is the server's
    clock on PostgreSQL (the transaction's first statement reads it)."""
    now = StatementNow()
    lease = sa.func.coalesce(p("lease_ms", type_=sa.BigInteger), _SNAPSHOT_LEASE_MS[dialect])
    return (
        sa.update(OCC)
        .where(
            OCC.c.id == p(occurrence_param),
            OCC.c.status == "queued",
            claimable_now(now),
            OCC.c.lease_owner.is_(None),
            ATTEMPTS_LEFT,
            OCC.c.cancel_requested.is_(False),
            OCC.c.exclusive.is_(False),
            OCC.c.delivery == "at-least-once",
            OCC.c.pool.is_(None),
            OCC.c.rate_limit.is_(None),
            ~sa.exists().where(CTL.c.occurrence_id == OCC.c.id),
            JOB_ALLOWS_CLAIM,
        )
        .values(
            status="running",
            fence=OCC.c.fence + 1,
            attempt=OCC.c.attempt + 1,
            lease_owner=p("owner"),
            lease_expires_at=now + lease,
            updated_at=now,
            settled_at=None,
        )
        .returning(*(OCC.c[name] for name in OCCURRENCE_COLUMNS), now.label("now"))
    )


def _queued_claim_logged(claimed: sa.CTE, name: str) -> sa.CTE:
    """The ``occurrence_claimed`` event of a queued claim's CTE: the attempt it wrote and
    the owner."""
    data = json_object(
        attempt=claimed.c.attempt,
        owner=p("owner", type_=sa.String),
        previous_owner=None,
        previous_status="queued",
    )
    return logged(
        claimed.c.now,
        sa.literal(EventType.OCCURRENCE_CLAIMED.value),
        claimed.c.job_id,
        claimed.c.id,
        claimed.c.fence,
        data,
    ).cte(name)


_queued = _claim_queued("postgresql").cte("claimed_queued")
_queued_logged = _queued_claim_logged(_queued, "claim_queued_logged")
#: The queued claim by dialect: PostgreSQL writes its event in the same statement (one
#: statement per claim); SQLite appends it after.
CLAIM_QUEUED_BY_DIALECT = {
    "postgresql": DriverStatement(sa.select(_queued).add_cte(_queued_logged), "postgresql"),
    "sqlite": DriverStatement(_claim_queued("sqlite"), "sqlite"),
}

#: A batch's run N settled and run N+1 (``next_id``) claimed in one statement (PostgreSQL,
#: sent alone: one round trip per run). The claim is guarded by the settle: no row when
#: the success was not plain (nothing written); a row whose claim columns are NULL when
#: the next one was not claimable this way (the success stands).
_next = (
    _claim_queued("postgresql", "next_id")
    .where(sa.exists(sa.select(PLAIN_SUCCESS.c.job_id)))
    .cte("next_claimed")
)
_next_logged = _queued_claim_logged(_next, "next_claim_logged")
SUCCEED_AND_CLAIM_QUEUED = DriverStatement(
    sa.select(PLAIN_SUCCESS.c.attempt.label("settled_attempt"), *_next.c)
    .select_from(PLAIN_SUCCESS.outerjoin(_next, sa.true()))
    .add_cte(PLAIN_SUCCESS_LOGGED)
    .add_cte(_next_logged),
    "postgresql",
)

USE_GRANT = (
    sa.update(requeue_grants)
    .where(requeue_grants.c.request_id == p("grant_id"), requeue_grants.c.claimed_at.is_(None))
    .values(claimed_at=p("now"))
)


def blocking_in_job(
    job_id: Any,
    occurrence_id: Any,
    exclusive: Any,
    waits_turn: Any,
    now: Any,
    available_at: Any,
) -> sa.ColumnElement[bool]:
    """An occurrence of the job (the ``occurrences`` row) that keeps the one described by
    the arguments (binds, or the columns of another alias of ``occurrences``) from
    starting: one running, for an exclusive occurrence (overlap queue/replace), and under
    every policy an at-most-once run whose outcome is unknown (it may still be having its
    effect). The claim counts them (BLOCKING_IN_JOB); :mod:`kernel.upkeep.blockers`
    names the first."""
    return sa.and_(
        OCC.c.job_id == job_id,
        OCC.c.id != occurrence_id,
        sa.or_(
            OCC.c.status == "needs_adjudication",
            sa.and_(OCC.c.status == "running", exclusive),
            # Exclusive runs start in order (overlap queue, a sequential backfill): one that
            # became available earlier and could start now goes first, whichever hint a
            # worker got first. Not for a reclaim: its expired run holds the job's one slot.
            sa.and_(
                waits_turn,
                OCC.c.exclusive,
                claimable_now(now),
                JOB_ALLOWS_CLAIM,  # a disabled job's waiting firings hold no run-now back
                sa.or_(
                    OCC.c.available_at < available_at,
                    sa.and_(OCC.c.available_at == available_at, OCC.c.id < occurrence_id),
                ),
            ),
        ),
    )


#: How many occurrences of its job keep ``occurrence_id`` from starting (:func:`blocking_in_job`).
#: One statement, one snapshot: a run settling into needs_adjudication meanwhile is seen in
#: one state or the other, and two exclusive runs are refused by
#: ``occurrences_one_running_exclusive``.
BLOCKING_IN_JOB = sa.select(sa.func.count()).where(
    blocking_in_job(
        p("job_id"),
        p("occurrence_id"),
        p("exclusive", type_=sa.Boolean),
        p("waits_turn", type_=sa.Boolean),
        p("now"),
        p("available_at"),
    )
)

_unresolved = OCC.alias("unresolved")
#: No run of the occurrence's job waits for a verdict on its outcome: what a claim
#: candidate and a hint need (BLOCKING_IN_JOB decides at the claim itself). An
#: at-least-once occurrence is not held (as in claiming.claim).
NO_UNRESOLVED_RUN = sa.or_(
    # Only at-most-once runs wait for verdicts: the others skip the lookup (first, so that
    # SQLite's OR stops there), which keeps a deep at-least-once backlog's scan as it was.
    OCC.c.delivery == "at-least-once",
    ~sa.exists().where(
        _unresolved.c.job_id == OCC.c.job_id, _unresolved.c.status == "needs_adjudication"
    ),
)
