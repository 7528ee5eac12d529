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

from typing import Any

import sqlalchemy as sa
from sqlalchemy import bindparam as p
from sqlalchemy.dialects import postgresql, sqlite

from kernel.clock import StatementNow
from kernel.driver import DriverStatement
from kernel.events import EventType
from kernel.schema import controls, events, jobs, occurrences, requeue_grants

__all__ = [
    "LOCK_OCCURRENCE",
    "APPEND_OUTPUT",
    "OCCURRENCE_BY_ID",
    "CONTROL_BY_ID",
    "OCCURRENCE_FOR_CLAIM",
    "UNCLAIMED_GRANT",
    "JOB_ALLOWS_CLAIM",
    "CLAIM",
    "CLAIM_AND_LOG",
    "CLAIM_BY_DIALECT",
    "RENEW",
    "SETTLE",
    "RELEASE",
    "REBIND_PAUSE_REQUEST",
    "TERMINATE_CONTROL",
    "SETTLED_EVENTS",
    "USE_GRANT",
    "CHILD_JOBS",
    "RUNNING_IN_JOB",
    "EXPIRED_LEASES",
    "EXPIRE",
    "CANCEL",
    "ACK_PAUSE",
    "HAND_BACK_CONTROL",
]

OCC = occurrences
CTL = controls

OCCURRENCE_BY_ID = sa.select(OCC).where(OCC.c.id == p("occ_id"))
CONTROL_BY_ID = sa.select(CTL).where(CTL.c.occurrence_id == p("occ_id"))

#: A claim's one read: the occurrence, its control's state (NULL: no control row) and
#: the transaction's instant (``now``: the server's clock on PostgreSQL, no round trip of
#: its own).
#: On PostgreSQL it locks the row, so what the claim decides from it (attempt spent or
#: free, grant used, expiry settled) is what holds when CLAIM writes: a concurrent
#: adjudicate or cancel is waited for, not overtaken. (SQLite: BEGIN IMMEDIATE already.)
OCCURRENCE_FOR_CLAIM = DriverStatement(
    sa.select(OCC, CTL.c.state.label("control_state"), StatementNow().label("now"))
    .select_from(OCC.outerjoin(CTL, CTL.c.occurrence_id == OCC.c.id))
    .where(OCC.c.id == p("occ_id"))
    .with_for_update(of=OCC)
)

#: Lock one occurrence row (PostgreSQL) before a transition that writes its control
#: first: every writer then takes the occurrence's lock before its control's, the one
#: order that cannot deadlock.
LOCK_OCCURRENCE = DriverStatement(
    sa.select(OCC.c.id).where(OCC.c.id == p("occ_id")).with_for_update()
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

#: A disabled job's occurrences wait (seed semantics) except manual ones: a run-now
#: works for a disabled job (SPEC §6), retries of it included.
#: The patterns are SQL literals, not binds: SQLite re-prepares a statement whose LIKE
#: pattern is a bound parameter at every run (its LIKE optimisation plans for the
#: value), which cost the claim three times its UPDATE (bench/README.md).
JOB_ALLOWS_CLAIM = sa.or_(
    OCC.c.trigger_key.like(sa.literal_column("'manual:%'")),
    # A one-shot job is disabled by its own firing (kernel.jobs.fire); that firing runs.
    OCC.c.trigger_key.like(sa.literal_column("'at:%'")),
    sa.exists().where(jobs.c.id == OCC.c.job_id, jobs.c.enabled),
)

#: Claim by compare-and-set on what the claimer decided from: the fence, status and
#: control state it read (a hand back or an adjudication in between changes how the
#: attempt counts, so the claim must be decided again).
_claim = (
    sa.update(OCC)
    .where(
        OCC.c.id == p("occ_id"),
        OCC.c.fence == p("seen_fence"),
        OCC.c.status == p("seen_status"),
        OCC.c.attempt == p("seen_attempt"),
        sa.func.coalesce(
            sa.select(CTL.c.state).where(CTL.c.occurrence_id == OCC.c.id).scalar_subquery(),
            "",
        )
        == p("seen_control_state"),
        OCC.c.cancel_requested.is_(False),
        _claimable_now,
        JOB_ALLOWS_CLAIM,
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
CLAIM = DriverStatement(_claim)

#: CLAIM and its ``occurrence_claimed`` event in one statement (PostgreSQL: a
#: data-modifying CTE), one round trip less per claim; the event's data is built by
#: the caller from what CLAIM compares (the attempt it writes is seen + increment).
_claimed = _claim.cte("claimed")
_claim_logged = (
    sa.insert(events)
    .from_select(
        ["at", "type", "job_id", "occurrence_id", "fence", "data"],
        sa.select(
            p("now", type_=sa.BigInteger),
            sa.literal(EventType.OCCURRENCE_CLAIMED.value),
            _claimed.c.job_id,
            _claimed.c.id,
            _claimed.c.fence,
            p("event_data", type_=sa.Text),
        ),
    )
    .cte("claim_logged")
)
CLAIM_AND_LOG = DriverStatement(sa.select(_claimed).add_cte(_claim_logged))
#: The claim a worker runs on each back end: PostgreSQL writes its event in the same
#: statement; SQLite (no data-modifying CTE) appends it after.
CLAIM_BY_DIALECT = {"postgresql": CLAIM_AND_LOG, "sqlite": CLAIM}


def _lease_held_at(now: Any) -> Any:
    return sa.and_(
        OCC.c.id == p("occ_id"),
        OCC.c.status == "running",
        OCC.c.lease_owner == p("owner"),
        OCC.c.fence == p("held_fence"),
        OCC.c.lease_expires_at > now,
    )


_lease_held = _lease_held_at(p("now"))

RENEW = (
    sa.update(OCC)
    .where(_lease_held)
    .values(lease_expires_at=p("lease_until"), updated_at=p("now"))
    .returning(OCC.c.cancel_requested)
)

#: A retry of a run an operator asked to cancel would wait for ever (no claim
#: takes a cancel-requested row): decided here, under the row's write lock, so a
#: cancel landing after the caller's retry decision still wins.
_cancel_wins = sa.and_(
    p("to_status", type_=sa.String) == sa.literal("retry_wait"), OCC.c.cancel_requested
)

#: The holder ends its run: succeeded, retry_wait, dead_letter or cancelled;
#: ``status`` returns what the statement decided, ``now`` the instant it ran at (the
#: first statement of a settle: on PostgreSQL it reads the server's clock itself).
#: ``control_open`` and ``has_children`` say whether the control and chain
#: statements have anything to do, so a plain run skips them; read in the
#: settling transaction (under SQLite's write lock), as those statements were.
_settle_now = StatementNow()
SETTLE = DriverStatement(
    sa.update(OCC)
    .where(_lease_held_at(_settle_now))
    .values(
        status=sa.case((_cancel_wins, "cancelled"), else_=p("to_status")),
        lease_owner=None,
        lease_expires_at=None,
        available_at=sa.case(
            (_cancel_wins, _settle_now), else_=_settle_now + p("retry_delay_ms", type_=sa.Integer)
        ),
        dispatched_at=None,
        result=p("result_json"),
        last_error=p("error_json"),
        settled_at=sa.case(
            (_cancel_wins, _settle_now),
            (p("to_status", type_=sa.String) == sa.literal("retry_wait"), None),
            else_=_settle_now,
        ),
        updated_at=_settle_now,
    )
    .returning(
        OCC.c.status,
        OCC.c.job_id,
        OCC.c.attempt,
        OCC.c.chain_depth,
        OCC.c.pool,
        OCC.c.available_at,
        sa.exists()
        .where(CTL.c.occurrence_id == p("occ_id"), CTL.c.state != "terminal")
        .label("control_open"),
        sa.exists().where(jobs.c.after_job == OCC.c.job_id).label("has_children"),
        _settle_now.label("now"),
    )
)

#: The holder hands the occurrence back unfinished (pause ack, warm shutdown);
#: a pending cancel wins, decided in the statement: the row ends ``cancelled``.
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
        updated_at=p("now"),
    )
    .returning(OCC.c.job_id, OCC.c.status, OCC.c.attempt, OCC.c.pool)
)

REBIND_PAUSE_REQUEST = (
    sa.update(CTL)
    .where(CTL.c.occurrence_id == p("occ_id"), CTL.c.state == "pause_requested")
    .values(expected_fence=p("new_fence"), revision=CTL.c.revision + 1, updated_at=p("now"))
    .returning(CTL.c.revision)
)

#: The occurrence settled: its control is history. Returns the pause request
#: and when it was acknowledged (unchanged columns): a NULL ``paused_at`` beside
#: a request id means a pause was still pending and is now ended.
TERMINATE_CONTROL = DriverStatement(
    sa.update(CTL)
    .where(CTL.c.occurrence_id == p("occ_id"), CTL.c.state != "terminal")
    .values(
        state="terminal", revision=CTL.c.revision + 1, terminal_at=p("now"), updated_at=p("now")
    )
    .returning(CTL.c.pause_request_id, CTL.c.paused_at, CTL.c.revision)
)

#: PostgreSQL's end of a settle, in one statement after SETTLE: the control made
#: ``terminal`` (its own statement, so its snapshot sees a pause request that landed
#: while SETTLE waited for the row), ``control_terminal`` for a pause still pending,
#: then the settle's event (``type``, ``data``): the same rows, in the same order, as
#: kernel/control.py ``end_control`` and ``Tx.emit`` write in two round trips.
_ended = (
    sa.update(CTL)
    .where(CTL.c.occurrence_id == p("occ_id"), CTL.c.state != "terminal")
    .values(
        state="terminal", revision=CTL.c.revision + 1, terminal_at=p("now"), updated_at=p("now")
    )
    .returning(CTL.c.pause_request_id, CTL.c.paused_at, CTL.c.revision)
    .cte("ended")
)
_EVENT_COLUMNS = ["at", "type", "job_id", "occurrence_id", "fence", "data"]
_ended_logged = (
    sa.insert(events)
    .from_select(
        _EVENT_COLUMNS,
        sa.select(
            p("now", type_=sa.BigInteger),
            sa.literal(EventType.CONTROL_TERMINAL.value),
            p("job_id", type_=sa.Text),
            p("occ_id", type_=sa.BigInteger),
            p("fence", type_=sa.Integer),
            # records.dumps's canonical text: sorted keys, no spaces
            sa.literal('{"request_id":')
            + sa.cast(sa.func.to_json(_ended.c.pause_request_id), sa.Text)
            + sa.literal(',"revision":')
            + sa.cast(_ended.c.revision, sa.Text)
            + sa.literal("}"),
        ).where(_ended.c.pause_request_id.is_not(None), _ended.c.paused_at.is_(None)),
    )
    .returning(events.c.id)
    .cte("ended_logged")
)
SETTLED_EVENTS = DriverStatement(
    sa.insert(events)
    .from_select(
        _EVENT_COLUMNS,
        sa.select(
            p("now", type_=sa.BigInteger),
            p("type", type_=sa.Text),
            p("job_id", type_=sa.Text),
            p("occ_id", type_=sa.BigInteger),
            p("fence", type_=sa.Integer),
            p("data", type_=sa.Text),
        )
        # Read after ended_logged ran to completion: its event comes first.
        .where(sa.select(sa.func.count()).select_from(_ended_logged).scalar_subquery() >= 0),
    )
    .add_cte(_ended)
    .add_cte(_ended_logged)
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

#: Attempts left, or a pause requested / resumed: a reclaim of such a run is
#: free (claiming.claim), so lease expiry never dead-letters it for exhaustion.
_attempts_left = sa.or_(
    OCC.c.attempt < OCC.c.max_attempts,
    sa.exists().where(
        CTL.c.occurrence_id == OCC.c.id,
        CTL.c.state.in_((sa.literal("pause_requested"), sa.literal("resumed"))),
    ),
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
        OCC.c.pool,
    )
    .where(
        OCC.c.status == "running",
        OCC.c.lease_expires_at <= p("now"),
        sa.or_(
            OCC.c.cancel_requested,
            OCC.c.delivery == "at-most-once",
            sa.not_(_attempts_left),
        ),
    )
    .order_by(OCC.c.lease_expires_at)
    .limit(p("limit"))
)

_expired_to = sa.case(
    (OCC.c.cancel_requested, "cancelled"),
    (OCC.c.delivery == "at-most-once", "needs_adjudication"),
    (sa.not_(_attempts_left), "dead_letter"),
)

#: Settle an expired lease that decides its own end, fenced; the choice is made
#: from the row as it is now: a pending cancel, at-most-once delivery, or no
#: attempts left. Any other expired row stays running, for a claim to reclaim.
EXPIRE = (
    sa.update(OCC)
    .where(
        OCC.c.id == p("occ_id"),
        OCC.c.status == "running",
        OCC.c.fence == p("held_fence"),
        OCC.c.lease_expires_at <= p("now"),
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
    .returning(OCC.c.status, OCC.c.last_error, OCC.c.pool)
)

_running = OCC.c.status == "running"

#: Cancel in one decision: a waiting occurrence ends ``cancelled`` at once, a
#: running one is flagged for its holder (seen on renew, and by settle, release
#: and lease expiry). Zero rows: settled, or a running one already flagged.
CANCEL = (
    sa.update(OCC)
    .where(
        OCC.c.id == p("occ_id"),
        OCC.c.status.in_(
            (
                sa.literal("queued"),
                sa.literal("retry_wait"),
                sa.literal("running"),
                sa.literal("awaiting_approval"),
            )
        ),
        sa.not_(sa.and_(_running, OCC.c.cancel_requested)),
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
_cancel_pending = sa.select(OCC.c.cancel_requested).where(OCC.c.id == p("occ_id")).scalar_subquery()

#: The holder acknowledges the pending pause request it was asked for, at a
#: safe point the request allows (``safe_points`` is a sorted JSON list of enum
#: values, so the quoted name matches exactly). Zero rows: read once to explain.
ACK_PAUSE = (
    sa.update(CTL)
    .where(
        CTL.c.occurrence_id == p("occ_id"),
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


def _hand_back_control(insert: Any) -> Any:
    """Warm shutdown: the control becomes ``resumed`` (claimable at once, no attempt
    used), or ``paused`` when a pause of this very run is pending; one upsert, so a
    pause request racing the hand back is either seen here or refused by its own guard.
    """
    statement = insert(CTL).values(
        occurrence_id=p("occ_id"),
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


HAND_BACK_CONTROL = {
    "postgresql": _hand_back_control(postgresql.insert),
    "sqlite": _hand_back_control(sqlite.insert),
}

#: A run's output as one ``run_output`` event, added only while (owner, fence) holds a
#: live lease.
APPEND_OUTPUT = (
    sa.insert(events)
    .from_select(
        ["at", "type", "job_id", "occurrence_id", "fence", "data"],
        sa.select(
            p("now", type_=sa.BigInteger),
            sa.literal(EventType.RUN_OUTPUT.value),
            occurrences.c.job_id,
            occurrences.c.id,
            occurrences.c.fence,
            p("data", type_=sa.Text),
        ).where(_lease_held),
    )
    .returning(events.c.id)
)  # RETURNING, not rowcount: INSERT ... SELECT reports -1 on psycopg
