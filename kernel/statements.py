"""Every statement of the hot path, built once and named by purpose.

Transitions are guarded UPDATEs: the WHERE clause carries the state, fence,
owner and lease the caller observed, so zero rows means someone else moved
first and the caller gets a precise domain error, never a silent overwrite.

The statements a worker runs per task (claim, settle; events in kernel/tx.py)
are :class:`~kernel.driver.DriverStatement` s: still Core here, rendered once
per dialect and run on the driver, because SQLAlchemy's per-execution cost
would otherwise exceed the database's (bench/kernel_throughput.py).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import bindparam as p

from kernel.driver import DriverStatement
from kernel.schema import controls, jobs, occurrences, pools, requeue_grants

__all__ = [
    "OCCURRENCE_BY_ID",
    "CONTROL_BY_ID",
    "OCCURRENCE_FOR_CLAIM",
    "UNCLAIMED_GRANT",
    "CLAIM",
    "RENEW",
    "SETTLE",
    "RELEASE",
    "REBIND_PAUSE_REQUEST",
    "TERMINATE_CONTROL",
    "USE_GRANT",
    "CHILD_JOBS",
    "RUNNING_IN_JOB",
    "RUNNING_IN_POOL",
    "EXPIRED_LEASES",
    "EXPIRE",
    "POOL_LIMIT",
]

OCC = occurrences
CTL = controls

OCCURRENCE_BY_ID = sa.select(OCC).where(OCC.c.id == p("occ_id"))
CONTROL_BY_ID = sa.select(CTL).where(CTL.c.occurrence_id == p("occ_id"))

#: A claim's one read: the occurrence and its control's state (NULL: no control row).
OCCURRENCE_FOR_CLAIM = DriverStatement(
    sa.select(OCC, CTL.c.state.label("control_state"))
    .select_from(OCC.outerjoin(CTL, CTL.c.occurrence_id == OCC.c.id))
    .where(OCC.c.id == p("occ_id"))
)

#: A requeue grant not yet used by a claim, valid for the fence it was made on.
UNCLAIMED_GRANT = (
    sa.select(requeue_grants.c.request_id)
    .where(
        requeue_grants.c.occurrence_id == p("occ_id"),
        requeue_grants.c.claimed_at.is_(None),
        requeue_grants.c.expected_fence == p("fence"),
    )
    .order_by(requeue_grants.c.created_at)
    .limit(1)
)

_claimable_now = sa.or_(
    # Literals, not an expanding IN, so the driver form is rendered once.
    sa.and_(
        OCC.c.status.in_((sa.literal("queued"), sa.literal("retry_wait"))),
        OCC.c.available_at <= p("now"),
    ),
    sa.and_(
        OCC.c.status == "running",
        OCC.c.lease_expires_at <= p("now"),
        OCC.c.delivery == "at-least-once",
    ),
)

#: Claim by compare-and-set on the fence the claimer observed.
CLAIM = DriverStatement(
    sa.update(OCC)
    .where(
        OCC.c.id == p("occ_id"),
        OCC.c.fence == p("seen_fence"),
        OCC.c.cancel_requested.is_(False),
        _claimable_now,
    )
    .values(
        status="running",
        fence=OCC.c.fence + 1,
        attempt=OCC.c.attempt + p("attempt_inc"),
        lease_owner=p("owner"),
        lease_expires_at=p("lease_until"),
        updated_at=p("now"),
        settled_at=None,
    )
    .returning(*OCC.c)
)

_lease_held = sa.and_(
    OCC.c.id == p("occ_id"),
    OCC.c.status == "running",
    OCC.c.lease_owner == p("owner"),
    OCC.c.fence == p("held_fence"),
    OCC.c.lease_expires_at > p("now"),
)

RENEW = (
    sa.update(OCC)
    .where(_lease_held)
    .values(lease_expires_at=p("lease_until"), updated_at=p("now"))
    .returning(OCC.c.cancel_requested)
)

#: The holder ends its run: succeeded, retry_wait, dead_letter or cancelled.
#: ``control_open`` and ``has_children`` say whether the control and chain
#: statements have anything to do, so a plain run skips them; read in the
#: settling transaction (under SQLite's write lock), as those statements were.
SETTLE = DriverStatement(
    sa.update(OCC)
    .where(_lease_held)
    .values(
        status=p("to_status"),
        lease_owner=None,
        lease_expires_at=None,
        available_at=p("next_available_at"),
        dispatched_at=None,
        result=p("result_json"),
        last_error=p("error_json"),
        settled_at=p("settled"),
        updated_at=p("now"),
    )
    .returning(
        OCC.c.job_id,
        OCC.c.attempt,
        OCC.c.chain_depth,
        sa.exists()
        .where(CTL.c.occurrence_id == p("occ_id"), CTL.c.state != "terminal")
        .label("control_open"),
        sa.exists().where(jobs.c.after_job == OCC.c.job_id).label("has_children"),
    )
)

#: The holder hands the occurrence back unfinished (pause ack, warm shutdown).
RELEASE = (
    sa.update(OCC)
    .where(_lease_held)
    .values(
        status="retry_wait",
        lease_owner=None,
        lease_expires_at=None,
        available_at=p("now"),
        dispatched_at=None,
        updated_at=p("now"),
    )
    .returning(OCC.c.job_id)
)

REBIND_PAUSE_REQUEST = (
    sa.update(CTL)
    .where(CTL.c.occurrence_id == p("occ_id"), CTL.c.state == "pause_requested")
    .values(expected_fence=p("new_fence"), revision=CTL.c.revision + 1, updated_at=p("now"))
)

TERMINATE_CONTROL = (
    sa.update(CTL)
    .where(CTL.c.occurrence_id == p("occ_id"), CTL.c.state != "terminal")
    .values(
        state="terminal", revision=CTL.c.revision + 1, terminal_at=p("now"), updated_at=p("now")
    )
)

USE_GRANT = (
    sa.update(requeue_grants)
    .where(requeue_grants.c.request_id == p("grant_id"), requeue_grants.c.claimed_at.is_(None))
    .values(claimed_at=p("now"))
)

CHILD_JOBS = sa.select(jobs.c.id, jobs.c.spec, jobs.c.revision, jobs.c.enabled).where(
    jobs.c.after_job == p("job_id")
)

RUNNING_IN_JOB = sa.select(sa.func.count()).where(
    OCC.c.job_id == p("job_id"), OCC.c.status == "running", OCC.c.id != p("occ_id")
)
RUNNING_IN_POOL = sa.select(sa.func.count()).where(
    OCC.c.pool == p("pool"), OCC.c.status == "running", OCC.c.id != p("occ_id")
)

EXPIRED_LEASES = (
    sa.select(
        OCC.c.id,
        OCC.c.job_id,
        OCC.c.fence,
        OCC.c.attempt,
        OCC.c.max_attempts,
        OCC.c.delivery,
        OCC.c.cancel_requested,
        OCC.c.chain_depth,
    )
    .where(OCC.c.status == "running", OCC.c.lease_expires_at <= p("now"))
    .order_by(OCC.c.lease_expires_at)
    .limit(p("limit"))
)

#: Move an expired running occurrence to a final or waiting state, fenced.
EXPIRE = (
    sa.update(OCC)
    .where(
        OCC.c.id == p("occ_id"),
        OCC.c.status == "running",
        OCC.c.fence == p("held_fence"),
        OCC.c.lease_expires_at <= p("now"),
    )
    .values(
        status=p("to_status"),
        lease_owner=None,
        lease_expires_at=None,
        last_error=p("error_json"),
        settled_at=p("settled"),
        updated_at=p("now"),
    )
)

POOL_LIMIT = sa.select(pools.c.concurrency).where(pools.c.name == p("pool"))
