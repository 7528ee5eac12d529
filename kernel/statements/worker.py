"""A lease holder's statements besides claim and settle, and the reads they share.

Transitions are guarded UPDATEs: the WHERE clause carries the state, fence,
owner and lease the caller observed, so zero rows means someone else moved
first and the caller gets a precise domain error, never a silent overwrite.

The statements a worker runs per task (claims.py, settles.py; events in
kernel/transaction/tx.py) are :class:`~kernel.db.driver.DriverStatement` s: still Core, rendered
once per dialect and run on the driver, because SQLAlchemy's per-execution cost
would otherwise exceed the database's (bench/kernel_throughput.py).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import bindparam as p
from sqlalchemy.dialects import postgresql, sqlite

from kernel.db.driver import DriverStatement
from kernel.db.schema import controls, events, occurrences
from kernel.events import EventType
from kernel.statements.logged import logged
from kernel.statements.predicates import LOST_LEASES_LEFT, OF_OCCURRENCE, lease_expired
from kernel.statements.settles import lease_held_at
from kernel.states import ACTIVE

__all__ = [
    "LOCK_OCCURRENCE",
    "APPEND_OUTPUT",
    "OCCURRENCE_BY_ID",
    "CONTROL_BY_ID",
    "RENEW",
    "RELEASE",
    "REBIND_PAUSE_REQUEST",
    "EXPIRED_LEASES",
    "EXPIRE",
    "CANCEL",
    "ACK_PAUSE",
    "RELEASE_CONTROL",
]

OCC = occurrences
CTL = controls

OCCURRENCE_BY_ID = sa.select(OCC).where(OCC.c.id == p("occurrence_id"))
CONTROL_BY_ID = sa.select(CTL).where(CTL.c.occurrence_id == p("occurrence_id"))

#: Lock one occurrence row (PostgreSQL) before a transition that writes its control
#: first: every writer then takes the occurrence's lock before its control's, the one
#: order that cannot deadlock.
LOCK_OCCURRENCE = DriverStatement(
    sa.select(OCC.c.id).where(OCC.c.id == p("occurrence_id")).with_for_update()
)

_lease_held = lease_held_at(p("now"))

#: The holder extends its lease; the run's newest checkpoint rides along (NULL: none
#: given since the last renewal, the stored one stays), fenced by the same guard.
RENEW = (
    sa.update(OCC)
    .where(_lease_held)
    .values(
        lease_expires_at=p("lease_until"),
        checkpoint=sa.func.coalesce(p("checkpoint", type_=sa.Text), OCC.c.checkpoint),
        updated_at=p("now"),
    )
    .returning(OCC.c.cancel_requested)
)

#: The holder hands the occurrence back unfinished (pause ack, warm shutdown), its
#: checkpoint the occurrence's newest; a pending cancel wins, decided in the statement:
#: the row ends ``cancelled``.
RELEASE = (
    sa.update(OCC)
    .where(_lease_held)
    .values(
        status=sa.case((OCC.c.cancel_requested, "cancelled"), else_="retry_wait"),
        lease_owner=None,
        lease_expires_at=None,
        available_at=p("now"),
        dispatched_at=None,
        last_error=sa.case(
            (OCC.c.cancel_requested, p("cancel_error", type_=sa.Text)), else_=OCC.c.last_error
        ),
        settled_at=sa.case((OCC.c.cancel_requested, p("now")), else_=None),
        checkpoint=p("checkpoint"),
        updated_at=p("now"),
    )
    .returning(OCC.c.job_id, OCC.c.status, OCC.c.attempt, OCC.c.pool)
)

REBIND_PAUSE_REQUEST = (
    sa.update(CTL)
    .where(CTL.c.occurrence_id == p(OF_OCCURRENCE), CTL.c.state == "pause_requested")
    .values(expected_fence=p("new_fence"), revision=CTL.c.revision + 1, updated_at=p("now"))
    .returning(CTL.c.revision)
)

EXPIRED_LEASES = (
    sa.select(
        OCC.c.id,
        OCC.c.job_id,
        OCC.c.fence,
        OCC.c.attempt,
        OCC.c.lost_leases,
        OCC.c.delivery,
        OCC.c.cancel_requested,
        OCC.c.chain_depth,
        OCC.c.pool,
    )
    .where(
        lease_expired(p("now")),
        sa.or_(
            OCC.c.cancel_requested,
            OCC.c.delivery == "at-most-once",
            sa.not_(LOST_LEASES_LEFT),
        ),
    )
    # The id breaks ties: Beats sweeping at once lock rows (and their chords) in one order.
    .order_by(OCC.c.lease_expires_at, OCC.c.id)
    .limit(p("limit"))
)

_expired_to = sa.case(
    (OCC.c.cancel_requested, "cancelled"),
    (OCC.c.delivery == "at-most-once", "needs_adjudication"),
    (sa.not_(LOST_LEASES_LEFT), "dead_letter"),
)

#: Settle an expired lease that decides its own end, fenced; the choice is made
#: from the row as it is now: a pending cancel, at-most-once delivery, or no lost
#: leases left (a poison pill). Any other expired row stays running, for a claim to
#: reclaim (spending no attempt: a lost worker is not the task's failure).
EXPIRE = (
    sa.update(OCC)
    .where(
        OCC.c.id == p("occurrence_id"),
        lease_expired(p("now")),
        OCC.c.fence == p("held_fence"),
        _expired_to.is_not(None),
    )
    .values(
        status=_expired_to,
        lease_owner=None,
        lease_expires_at=None,
        last_error=sa.case(
            (OCC.c.cancel_requested, None),
            (OCC.c.delivery == "at-most-once", p("adjudication_error", type_=sa.Text)),
            else_=p("exhausted_error", type_=sa.Text),
        ),
        settled_at=sa.case(
            (OCC.c.cancel_requested, p("now")),
            (OCC.c.delivery == "at-most-once", None),
            else_=p("now"),
        ),
        updated_at=p("now"),
    )
    .returning(OCC.c.status, OCC.c.last_error, OCC.c.pool, OCC.c.links, OCC.c.trigger_key)
)

_running = OCC.c.status == "running"

#: Cancel in one decision: a waiting occurrence ends ``cancelled`` at once, a
#: running one is flagged for its holder (seen on renew, and by settle, release
#: and lease expiry). Zero rows: settled, or a running one already flagged.
CANCEL = (
    sa.update(OCC)
    .where(
        OCC.c.id == p("occurrence_id"),
        # Literals, not an expanding IN, so the driver form is rendered once.
        OCC.c.status.in_([sa.literal(s.value) for s in ACTIVE]),
        sa.not_(sa.and_(_running, OCC.c.cancel_requested)),
        # A revoke without terminate leaves a running one be, as Celery's does.
        sa.or_(sa.not_(_running), p("stop_running", type_=sa.Boolean)),
    )
    .values(
        status=sa.case((_running, "running"), else_="cancelled"),
        cancel_requested=sa.case((_running, sa.true()), else_=OCC.c.cancel_requested),
        settled_at=sa.case((_running, None), else_=p("now")),
        approval_due_at=None,
        updated_at=p("now"),
    )
    .returning(OCC.c.status, OCC.c.job_id, OCC.c.fence, OCC.c.attempt)
)

#: A cancel pending on the occurrence wins over the pause (RELEASE cancels it).
_cancel_pending = (
    sa.select(OCC.c.cancel_requested).where(OCC.c.id == p(OF_OCCURRENCE)).scalar_subquery()
)

#: The holder acknowledges the pending pause request it was asked for, at a
#: safe point the request allows (``safe_points`` is a sorted JSON list of enum
#: values, so the quoted name matches exactly). Zero rows: read once to explain.
ACK_PAUSE = (
    sa.update(CTL)
    .where(
        CTL.c.occurrence_id == p(OF_OCCURRENCE),
        CTL.c.state == "pause_requested",
        CTL.c.pause_request_id == p("request_id"),
        CTL.c.expected_fence == p("held_fence"),
        sa.or_(
            p("expected_revision", type_=sa.Integer).is_(None),
            CTL.c.revision == p("expected_revision"),
        ),
        CTL.c.safe_points.contains(p("quoted_safe_point", type_=sa.Text), autoescape=False),
    )
    .values(
        state=sa.case((_cancel_pending, "terminal"), else_="paused"),
        revision=CTL.c.revision + 1,
        checkpoint=sa.case((_cancel_pending, CTL.c.checkpoint), else_=p("checkpoint")),
        paused_at=sa.case((_cancel_pending, CTL.c.paused_at), else_=p("now")),
        terminal_at=sa.case((_cancel_pending, p("now")), else_=CTL.c.terminal_at),
        updated_at=p("now"),
    )
    .returning(CTL.c.pause_request_id)
)

_pause_pending = sa.and_(CTL.c.state == "pause_requested", CTL.c.expected_fence == p("held_fence"))


def _release_control(insert: Any) -> Any:
    """Warm shutdown: the control becomes ``resumed`` (claimable at once, no attempt
    used), or ``paused`` when a pause of this very run is pending; one upsert, so a
    pause request racing the hand back is either seen here or refused by its own guard.
    """
    statement = insert(CTL).values(
        occurrence_id=p("occurrence_id"),
        state="resumed",
        revision=1,
        expected_fence=p("held_fence"),
        safe_points=p("safe_points"),
        checkpoint=p("checkpoint"),
        resumed_at=p("now"),
        updated_at=p("now"),
    )
    return statement.on_conflict_do_update(
        index_elements=[CTL.c.occurrence_id],
        set_={
            "state": sa.case((_pause_pending, "paused"), else_="resumed"),
            "revision": CTL.c.revision + 1,
            "expected_fence": p("held_fence"),
            "checkpoint": p("checkpoint"),
            "paused_at": sa.case((_pause_pending, p("now")), else_=CTL.c.paused_at),
            "resumed_at": sa.case((_pause_pending, CTL.c.resumed_at), else_=p("now")),
            "updated_at": p("now"),
        },
    ).returning(CTL.c.state, CTL.c.pause_request_id)


RELEASE_CONTROL = {
    "postgresql": _release_control(postgresql.insert),
    "sqlite": _release_control(sqlite.insert),
}

#: A run's output as one ``run_output`` event, added only while (owner, fence) holds a
#: live lease.
APPEND_OUTPUT = logged(
    p("now", type_=sa.BigInteger),
    sa.literal(EventType.RUN_OUTPUT.value),
    occurrences.c.job_id,
    occurrences.c.id,
    occurrences.c.fence,
    p("data", type_=sa.Text),
    where=_lease_held,
).returning(events.c.id)  # RETURNING, not rowcount: INSERT ... SELECT reports -1 on psycopg
