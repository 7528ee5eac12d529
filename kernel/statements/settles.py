"""A settle's statements: the holder ends its run, its control and its events.

Run on the driver (kernel.db.driver.DriverStatement): one settle per task.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import bindparam as p

from kernel.db.clock import StatementNow
from kernel.db.driver import DriverStatement
from kernel.db.json_text import json_object
from kernel.db.schema import controls, jobs, occurrences
from kernel.events import EventType
from kernel.statements.logged import logged

__all__ = [
    "SETTLE",
    "SUCCEED_PLAIN_BY_DIALECT",
    "TERMINATE_CONTROL",
    "SETTLED_EVENTS",
    "CHILD_JOBS",
]

OCC = occurrences
CTL = controls


def lease_held_at(now: Any) -> Any:
    """The run's lease holds at ``now``: the guard of every write its holder makes."""
    return sa.and_(
        OCC.c.id == p("occurrence_id"),
        OCC.c.status == "running",
        OCC.c.lease_owner == p("owner"),
        OCC.c.fence == p("held_fence"),
        OCC.c.lease_expires_at > now,
    )


_to_status = p("to_status", type_=sa.String)
_at_most_once = OCC.c.delivery == "at-most-once"
#: An at-most-once run whose failure left its effect unknown is never retried: it waits
#: for a verdict (the adapter's, then an operator's), as an expired lease does. Decided
#: here from the stored ``delivery``, not from what the caller read earlier.
_unknown_once = sa.and_(p("effect", type_=sa.String) == sa.literal("unknown"), _at_most_once)
#: A retry of a run an operator asked to cancel would wait for ever (no claim
#: takes a cancel-requested row): decided here, under the row's write lock, so a
#: cancel landing after the caller's retry decision still wins. A cancel also wins
#: over an unknown outcome, as it does at a lease's expiry (kernel.occurrences.lease_expiry.expire).
_cancel_wins = sa.and_(
    sa.or_(_to_status == sa.literal("retry_wait"), _unknown_once), OCC.c.cancel_requested
)
#: What the settle leads to: the caller's choice unless a cancel, an unknown outcome of
#: an at-most-once run, or a known applied one (never repeated: dead letter) overrides it.
_settled_to = sa.case(
    (_cancel_wins, "cancelled"),
    (_unknown_once, "needs_adjudication"),
    (
        sa.and_(
            p("effect", type_=sa.String) == sa.literal("applied"),
            _at_most_once,
            _to_status == sa.literal("retry_wait"),
        ),
        "dead_letter",
    ),
    else_=_to_status,
)


#: The holder ends its run: succeeded, retry_wait, dead_letter, needs_adjudication or
#: cancelled; ``status`` returns what the statement decided, ``now`` the instant it ran at (the
#: first statement of a settle: on PostgreSQL it reads the server's clock itself).
#: ``control_open`` and ``has_children`` say whether the control and chain
#: statements have anything to do, so a plain run skips them; read in the
#: settling transaction (under SQLite's write lock), as those statements were.
def _ended_run(now: Any) -> dict[str, Any]:
    """What every settle writes: the lease is gone, the result and error are the run's."""
    return {
        "lease_owner": None,
        "lease_expires_at": None,
        "dispatched_at": None,
        "result": p("result_json"),
        "last_error": p("error_json"),
        "updated_at": now,
    }


_settle_now = StatementNow()
SETTLE = DriverStatement(
    sa.update(OCC)
    .where(lease_held_at(_settle_now))
    .values(
        status=_settled_to,
        available_at=sa.case(
            (
                _settled_to == sa.literal("retry_wait"),
                _settle_now + p("retry_delay_ms", type_=sa.Integer),
            ),
            else_=_settle_now,
        ),
        settled_at=sa.case(
            (_settled_to.in_((sa.literal("retry_wait"), sa.literal("needs_adjudication"))), None),
            else_=_settle_now,
        ),
        # A retry the job code gave new arguments (Celery's ``retry(args=...)``) runs
        # with them: stored only when this statement decides the retry.
        definition=sa.case(
            (
                sa.and_(
                    _settled_to == sa.literal("retry_wait"),
                    p("definition_json", type_=sa.Text).is_not(None),
                ),
                p("definition_json", type_=sa.Text),
            ),
            else_=OCC.c.definition,
        ),
        **_ended_run(_settle_now),
    )
    .returning(
        OCC.c.status,
        OCC.c.job_id,
        OCC.c.attempt,
        OCC.c.chain_depth,
        OCC.c.pool,
        OCC.c.available_at,
        sa.exists()
        .where(CTL.c.occurrence_id == p("occurrence_id"), CTL.c.state != "terminal")
        .label("control_open"),
        sa.exists().where(jobs.c.after_job == OCC.c.job_id).label("has_children"),
        OCC.c.links,
        OCC.c.trigger_key,
        _settle_now.label("now"),
    )
)

#: The occurrence settled: its control is history. Returns the pause request
#: and when it was acknowledged (unchanged columns): a NULL ``paused_at`` beside
#: a request id means a pause was still pending and is now ended.
_terminate_control = (
    sa.update(CTL)
    .where(CTL.c.occurrence_id == p("occurrence_id"), CTL.c.state != "terminal")
    .values(
        state="terminal", revision=CTL.c.revision + 1, terminal_at=p("now"), updated_at=p("now")
    )
    .returning(CTL.c.pause_request_id, CTL.c.paused_at, CTL.c.revision)
)
TERMINATE_CONTROL = DriverStatement(_terminate_control)

#: PostgreSQL's end of a settle, in one statement after SETTLE: the control made
#: ``terminal`` (its own statement, so its snapshot sees a pause request that landed
#: while SETTLE waited for the row), ``control_terminal`` for a pause still pending,
#: then the settle's event (``type``, ``data``): the same rows, in the same order, as
#: kernel/occurrences/control.py ``end_control`` and ``Tx.emit`` write in two round trips.
_ended = _terminate_control.cte("ended")
_ended_logged = (
    logged(
        p("now", type_=sa.BigInteger),
        sa.literal(EventType.CONTROL_TERMINAL.value),
        p("job_id", type_=sa.Text),
        p("occurrence_id", type_=sa.BigInteger),
        p("fence", type_=sa.Integer),
        json_object(request_id=_ended.c.pause_request_id, revision=_ended.c.revision),
        where=sa.and_(_ended.c.pause_request_id.is_not(None), _ended.c.paused_at.is_(None)),
    )
    .returning(sa.literal_column("id"))
    .cte("ended_logged")
)
SETTLED_EVENTS = DriverStatement(
    logged(
        p("now", type_=sa.BigInteger),
        p("type", type_=sa.Text),
        p("job_id", type_=sa.Text),
        p("occurrence_id", type_=sa.BigInteger),
        p("fence", type_=sa.Integer),
        p("data", type_=sa.Text),
        # Read after ended_logged ran to completion: its event comes first.
        where=sa.select(sa.func.count()).select_from(_ended_logged).scalar_subquery() >= 0,
    )
    .add_cte(_ended)
    .add_cte(_ended_logged)
)

_control_open = sa.exists().where(CTL.c.occurrence_id == OCC.c.id, CTL.c.state != "terminal")
_has_children = sa.exists().where(jobs.c.after_job == OCC.c.job_id)
_snapshot_row = OCC.alias("as_read")
#: PostgreSQL: the row is the version this statement's snapshot read. A pause request
#: that commits while the settle waits for the row lock writes the row too (REQUEST_PAUSE),
#: so PostgreSQL re-checks this guard against its new version, which fails it: the
#: control the snapshot cannot see is then ended by SETTLE and SETTLED_EVENTS, whose
#: own snapshot sees it.
_unchanged_since_read = sa.literal_column("occurrences.xmin") == (
    sa.select(sa.literal_column("as_read.xmin"))
    .select_from(_snapshot_row)
    .where(_snapshot_row.c.id == p("occurrence_id"))
    .scalar_subquery()
)


def succeed_plain(dialect: str) -> sa.Update:
    """A success that owes nothing beyond its own row and event, decided whole in one
    statement: no open control, no pool slot to give back, no job chained after it, no
    links (the caller knows the result asks for no budget units)."""
    now = StatementNow()
    guard = [lease_held_at(now), OCC.c.pool.is_(None), ~_control_open, ~_has_children]
    guard.append(OCC.c.links.is_(None))
    if dialect == "postgresql":
        guard.append(_unchanged_since_read)
    return (
        sa.update(OCC)
        .where(*guard)
        .values(status="succeeded", available_at=now, settled_at=now, **_ended_run(now))
        .returning(OCC.c.job_id, OCC.c.attempt, now.label("now"))
    )


#: A plain success and its event as CTEs (PostgreSQL), here and in a batch's
#: SUCCEED_AND_CLAIM_QUEUED.
PLAIN_SUCCESS = succeed_plain("postgresql").cte("succeeded_plain")
PLAIN_SUCCESS_LOGGED = logged(
    PLAIN_SUCCESS.c.now,
    sa.literal(EventType.OCCURRENCE_SUCCEEDED.value),
    PLAIN_SUCCESS.c.job_id,
    p("occurrence_id", type_=sa.BigInteger),
    p("held_fence", type_=sa.Integer),
    json_object(attempt=PLAIN_SUCCESS.c.attempt),
).cte("succeeded_plain_logged")
#: A plain success by dialect: PostgreSQL writes its event in the same statement (sent
#: alone, it is the whole transaction); SQLite appends it after.
SUCCEED_PLAIN_BY_DIALECT = {
    "postgresql": DriverStatement(
        sa.select(PLAIN_SUCCESS).add_cte(PLAIN_SUCCESS_LOGGED), "postgresql"
    ),
    "sqlite": DriverStatement(succeed_plain("sqlite"), "sqlite"),
}

CHILD_JOBS = sa.select(jobs.c.id, jobs.c.spec, jobs.c.revision, jobs.c.enabled).where(
    jobs.c.after_job == p("job_id")
)
