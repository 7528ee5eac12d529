"""Operator and runtime-control statements: each write carries its own guard.

An operator action writes first and reads only when it changed nothing, to
raise the precise error. ``None`` for an expected value means the caller gave
none (SPEC I7): the guard then does not compare it.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import bindparam as p
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from kernel.db.schema import controls, jobs, occurrences, operator_requests, requeue_grants
from kernel.spec.task_runs import TASK_JOB_PREFIX
from kernel.statements.predicates import OF_OCCURRENCE
from kernel.states import ACTIVE

__all__ = [
    "RECORD_REQUEST",
    "REQUEST_BY_ID",
    "REQUEST_PAUSE",
    "RESUME",
    "MAKE_AVAILABLE",
    "REQUEUE",
    "ADJUDICATE",
    "GRANT",
    "VERDICT_RETURNS",
    "RUNS_BY_CALLER_KEY",
    "STAMPED_RUNS",
]

OCC = occurrences
CTL = controls

#: What a verdict on an uncertain run (operator's or adapter's) returns: enough to end
#: its control and fire the chained children its outcome triggers, as a settle does.
VERDICT_RETURNS = (
    OCC.c.job_id,
    OCC.c.fence,
    OCC.c.chain_depth,
    sa.exists().where(jobs.c.after_job == OCC.c.job_id).label("has_children"),
    OCC.c.links,
    OCC.c.trigger_key,
)


#: The task jobs (implicit, one per Celery task name): few, so a lookup of a caller's key
#: among their runs is one seek on (job_id, trigger_key) per task job.
_TASK_JOBS = sa.select(jobs.c.id).where(jobs.c.id.startswith(TASK_JOB_PREFIX, autoescape=True))

#: The runs of task jobs enqueued under a caller's key (``trigger_key``: ``key:<Celery task
#: id>``): a routed call's, found by the task id its caller holds.
RUNS_BY_CALLER_KEY = (
    sa.select(OCC.c.id, OCC.c.trigger_key, OCC.c.fence, OCC.c.queue, OCC.c.status)
    .where(OCC.c.trigger_key == p("trigger_key"), OCC.c.job_id.in_(_TASK_JOBS))
    .order_by(OCC.c.id)
)

#: A page (``after_id``, ``limit``) of the active runs of task jobs whose definition
#: (canonical JSON) has a ``stamps`` object, for a revoke by stamped headers to match
#: against the run's request (a pre-filter: an argument's key may be named so too).
STAMPED_RUNS = (
    sa.select(OCC.c.id, OCC.c.trigger_key, OCC.c.fence, OCC.c.queue, OCC.c.status, OCC.c.definition)
    .where(
        OCC.c.id > p("after_id"),
        OCC.c.status.in_([sa.literal(s.value) for s in ACTIVE]),
        OCC.c.job_id.in_(_TASK_JOBS),
        OCC.c.definition.contains('"stamps":{', autoescape=True),
    )
    .order_by(OCC.c.id)
    .limit(p("limit"))
)


def _unless_given(name: str, column: Any) -> Any:
    """``column = :name`` when the caller gave a value, true when it gave None."""
    value = sa.cast(p(name), column.type)
    return sa.or_(value.is_(None), column == value)


def _per_dialect(build: Any) -> dict[str, Any]:
    return {"postgresql": build(postgresql.insert), "sqlite": build(sqlite.insert)}


#: First use of a request id wins; a racing second use inserts nothing.
RECORD_REQUEST = _per_dialect(
    lambda insert: (
        insert(operator_requests)
        .values(
            request_id=p("request_id"),
            action=p("action"),
            target=p("target"),
            evidence=p("evidence"),
            operator=p("operator"),
            created_at=p("now"),
        )
        .on_conflict_do_nothing(index_elements=[operator_requests.c.request_id])
        .returning(operator_requests.c.request_id)
    )
)
REQUEST_BY_ID = sa.select(operator_requests).where(
    operator_requests.c.request_id == p("request_id")
)


def _request_pause(dialect: str) -> Any:
    """A pause request for the live run (under the expected fence, if given): a new
    control row, or a settled-with/resumed one reopened (under the expected revision)."""
    live_run = sa.and_(
        OCC.c.id == p("occurrence_id"),
        OCC.c.status == "running",
        OCC.c.lease_expires_at > p("now"),
        _unless_given("expected_fence", OCC.c.fence),
    )
    held: Any = OCC
    if dialect == "postgresql":
        # Writing the run's row makes PostgreSQL re-check this guard against a settle
        # or hand back that committed while the statement waited (READ COMMITTED), and
        # a plain success waiting behind this request re-check its own against the new
        # row version (statements/settles.py, WORKER_SUCCEEDS_PLAIN), so neither acts on
        # an older snapshot. SQLite's writers are serial.
        held = (
            sa.update(OCC)
            .where(live_run)
            .values(updated_at=p("now"))
            .returning(OCC.c.id, OCC.c.fence)
            .cte("held_run")
        )
        live_run = sa.true()
    holder = sa.select(
        held.c.id,
        sa.literal("pause_requested"),
        sa.literal(1),
        held.c.fence,
        p("request_id", type_=sa.String),
        p("safe_points", type_=sa.Text),
        p("now", type_=sa.BigInteger),
        p("now", type_=sa.BigInteger),
    ).where(live_run)
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    columns = [
        "occurrence_id",
        "state",
        "revision",
        "expected_fence",
        "pause_request_id",
        "safe_points",
        "requested_at",
        "updated_at",
    ]
    statement = insert(CTL).from_select(columns, holder)
    excluded = statement.excluded
    return statement.on_conflict_do_update(
        index_elements=[CTL.c.occurrence_id],
        set_={
            "state": "pause_requested",
            "revision": CTL.c.revision + 1,
            "expected_fence": excluded.expected_fence,
            "pause_request_id": excluded.pause_request_id,
            "resume_request_id": None,
            "safe_points": excluded.safe_points,
            "requested_at": excluded.requested_at,
            "paused_at": None,
            "resumed_at": None,
            "terminal_at": None,
            "updated_at": excluded.updated_at,
        },
        where=sa.and_(
            CTL.c.state.in_(("terminal", "resumed")),
            _unless_given("expected_revision", CTL.c.revision),
        ),
    ).returning(CTL.c.revision, CTL.c.expected_fence)


REQUEST_PAUSE = {dialect: _request_pause(dialect) for dialect in ("postgresql", "sqlite")}

RESUME = (
    sa.update(CTL)
    .where(
        CTL.c.occurrence_id == p(OF_OCCURRENCE),
        CTL.c.state == "paused",
        _unless_given("expected_revision", CTL.c.revision),
    )
    .values(
        state="resumed",
        revision=CTL.c.revision + 1,
        resume_request_id=p("request_id"),
        resumed_at=p("now"),
        updated_at=p("now"),
    )
    .returning(CTL.c.revision)
)

#: A resumed (paused, handed back) occurrence is claimable at once.
MAKE_AVAILABLE = (
    sa.update(OCC)
    .where(OCC.c.id == p("occurrence_id"), OCC.c.status == "retry_wait")
    .values(available_at=p("now"), dispatched_at=None, updated_at=p("now"))
    .returning(OCC.c.job_id, OCC.c.fence)
)


class _last_error_code(FunctionElement[str]):
    """The ``code`` of an occurrence's ``last_error`` (canonical JSON text), as text.

    A JSON extraction on each back end, not a LIKE: SQLite plans a LIKE for its bound
    pattern, so it re-prepared the statement on every call with a new one.
    """

    type = sa.Text()
    name = "last_error_code"
    inherit_cache = True


@compiles(_last_error_code)
def _last_error_code_sqlite(element: _last_error_code, compiler: SQLCompiler, **kw: Any) -> str:
    return f"json_extract({compiler.process(element.clauses, **kw)}, '$.code')"


@compiles(_last_error_code, "postgresql")
def _last_error_code_postgresql(element: _last_error_code, compiler: SQLCompiler, **kw: Any) -> str:
    return f"(CAST({compiler.process(element.clauses, **kw)} AS JSONB) ->> 'code')"


#: Revive a dead letter for one more claim (its error code ``expected_error_code``, when
#: given). The operator revives it: a cancel request of the dead run is spent (no claim
#: takes a flagged row).
REQUEUE = (
    sa.update(OCC)
    .where(
        OCC.c.id == p("occurrence_id"),
        OCC.c.status == "dead_letter",
        _unless_given("expected_fence", OCC.c.fence),
        _unless_given("expected_error_code", _last_error_code(OCC.c.last_error)),
    )
    .values(
        status="retry_wait",
        available_at=p("now"),
        dispatched_at=None,
        settled_at=None,
        updated_at=p("now"),
        cancel_requested=False,
    )
    .returning(OCC.c.job_id, OCC.c.fence, OCC.c.last_error)
)


#: An operator's verdict on an at-most-once run whose outcome is unknown.
ADJUDICATE = (
    sa.update(OCC)
    .where(OCC.c.id == p("occurrence_id"), OCC.c.status == "needs_adjudication")
    .values(
        status=p("to_status"),
        available_at=p("now"),
        dispatched_at=None,
        settled_at=p("settled"),
        last_error=sa.func.coalesce(sa.cast(p("error_json"), sa.Text), OCC.c.last_error),
        updated_at=p("now"),
    )
    .returning(*VERDICT_RETURNS)
)

#: One more claim without consuming an attempt; a replayed request adds nothing.
GRANT = _per_dialect(
    lambda insert: (
        insert(requeue_grants)
        .values(
            request_id=p("request_id"),
            occurrence_id=p("occurrence_id"),
            expected_fence=p("fence"),
            expected_error_code=p("error_code"),
            created_at=p("now"),
            claimed_at=None,
        )
        .on_conflict_do_nothing(index_elements=[requeue_grants.c.request_id])
    )
)
