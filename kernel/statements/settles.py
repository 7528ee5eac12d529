"""A settle's statements: the holder ends its run, its control and its events.

Run on the driver (kernel.driver.DriverStatement): one settle per task.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import bindparam as p

from kernel.clock import StatementNow
from kernel.driver import DriverStatement
from kernel.events import EventType
from kernel.schema import controls, events, jobs, occurrences

__all__ = [
    "SETTLE",
    "TERMINATE_CONTROL",
    "SETTLED_EVENTS",
    "CHILD_JOBS",
]

OCC = occurrences
CTL = controls


def lease_held_at(now: Any) -> Any:
    """The run's lease holds at ``now``: the guard of every write its holder makes."""
    return sa.and_(
        OCC.c.id == p("occ_id"),
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
#: over an unknown outcome, as it does at a lease's expiry (kernel.runs.expire).
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
_settle_now = StatementNow()
SETTLE = DriverStatement(
    sa.update(OCC)
    .where(lease_held_at(_settle_now))
    .values(
        status=_settled_to,
        lease_owner=None,
        lease_expires_at=None,
        available_at=sa.case(
            (
                _settled_to == sa.literal("retry_wait"),
                _settle_now + p("retry_delay_ms", type_=sa.Integer),
            ),
            else_=_settle_now,
        ),
        dispatched_at=None,
        result=p("result_json"),
        last_error=p("error_json"),
        settled_at=sa.case(
            (_settled_to.in_((sa.literal("retry_wait"), sa.literal("needs_adjudication"))), None),
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

CHILD_JOBS = sa.select(jobs.c.id, jobs.c.spec, jobs.c.revision, jobs.c.enabled).where(
    jobs.c.after_job == p("job_id")
)
