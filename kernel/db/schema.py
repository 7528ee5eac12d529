"""The kernel's tables (SQLAlchemy Core). This docstring is the data dictionary.

Times are integers: milliseconds since the Unix epoch, UTC. One representation on
both dialects keeps comparisons in SQL exact and cheap; on PostgreSQL "now" comes
from the server's clock (SPEC I9), on SQLite from the kernel's clock.

jobs
    One row per job id. ``spec`` is the normalised definition (canonical JSON),
    ``digest`` its sha256, ``revision`` counts changes of content. ``next_fire_at``
    / ``next_trigger_key`` are Beat's fire cursor: the next firing not yet
    materialised; Beat advances them by compare-and-set on (revision, cursor).
    ``planned`` is false until a Beat has placed the cursor (after define, revise,
    enable); a planned job with a NULL cursor has no firings left. ``after_job``
    mirrors ``spec.after.job`` so chained children are found by index; a fan-in job
    (``spec.after.all``) holds ``*fan-in*`` there, so Beat finds fan-ins by the same index.
    ``scheduled_runs``: the runs its schedule made (``max_runs`` bounds them); ``schedule_spent``:
    disabled by its schedule running out (0014). ``plan_error``: why Beat cannot plan or fire
    this revision; its next fire or revision clears it (0016).
occurrences
    One row per logical firing (SPEC I1: unique (job_id, trigger_key); ``idempotency_key``
    is made of them, unique with them, no index of its own: revision 0028). ``definition``
    is the job spec snapshot (I5).
    ``fence`` grows by one per claim; ``lease_owner``/``lease_expires_at`` name
    the live holder. ``available_at`` gates claims of queued/retry_wait rows;
    ``dispatched_at`` is when the pump last published a hint. ``exclusive`` rows
    wait while another occurrence of the same job runs (overlap queue/replace);
    ``pool`` rows wait while the pool is full. ``cancel_requested`` is seen by
    the running worker on renew. ``chain_depth``/``parent_id`` give chain lineage.
    ``approval_due_at``/``approval_auto``: while ``awaiting_approval``, when Beat
    applies the job's auto action (``approve`` | ``reject``) (revision 0005).
    ``priority``: among claimable occurrences the pump hints higher ones first (an
    enqueue's ``priority``; 0 otherwise). An enqueued occurrence's trigger key is
    ``key:<key>`` (its caller's key) or ``enqueue:<ms><random>`` (0010; time first).
    ``checkpoint``: the newest checkpoint a run of it stored (canonical JSON envelope, data
    <= 64 KiB): with a lease renewal while it runs, or at a pause or hand back; the next
    claim resumes from it (revision 0015). ``lost_leases``: reclaims after an expired lease
    (no attempt spent); at ``max_lost_leases`` an expiry dead-letters it (revision 0017).
    ``occurrences_job_newest`` walks a job's rows newest first (revision 0018).
    ``links``: an enqueue's callbacks and errbacks (kernel/spec/enqueue_request.py; 0020).
    ``expires_at``: the start deadline (Celery's ``expires``): a waiting row met at or after
    it is settled ``skipped`` (reason ``expired``), never claimed (revision 0021).
    ``rate_limit``: the rate limit its claim takes a token of (its snapshot's ``rate_limit``
    spaces them; NULL: none) (revision 0022).
controls
    Runtime control of one occurrence: pause_requested -> paused -> resumed ->
    terminal. ``revision`` is the CAS token; ``expected_fence`` binds the request
    to one claim; ``checkpoint`` is the one stored when the run paused or was handed
    back (the occurrence's own ``checkpoint`` is the newest of any kind).
requeue_grants
    An operator's permission for one more claim of a dead letter without
    consuming an attempt; ``claimed_at`` is set by the claim that uses it.
operator_requests
    Every operator action by request id, with the evidence it was made on, so a
    replay answers "deduplicated" and a replay with other evidence is refused.
events
    Append-only log; every state change writes its events in its transaction.
    ``xact`` (PostgreSQL; revision 0013) is the writing transaction's id, set by the
    column's default: followers read by it, since ids commit out of order there.
beats
    Each Beat's heartbeat: ``last_tick_at`` and its tick interval.
job_sources
    One row per job a declarative source owns (``source``: ``beat_schedule``;
    ``name``: the entry's own name, which the job id was derived from); ``retired_at``
    is set while the source no longer lists it (the job is then disabled).
adjudication_asks
    A worker asking the adapter about an occurrence in ``needs_adjudication`` (revision
    0007): one row per occurrence, for the uncertain run at ``fence``. ``token`` names
    the live ask, which holds until ``ask_deadline``; ``asks`` counts the asks at this
    fence (an expired ask may be asked again while ``asks`` < the limit). ``state``:
    ``asking``, or ``cannot_tell`` (the adapter could not tell: only the operator
    decides). The verdicts themselves are ``occurrence_adjudicated`` events.
notifications
    A job's ``notify`` of a run's ``event`` (dead_letter, failed, needs_adjudication,
    overrun, stranded), written by the change that causes it, once per run and event
    (unique ``occurrence_id, fence, event``, revision 0019). ``body``: the JSON sent.
    ``state`` ``pending`` (a try may start at ``next_at``) -> ``delivering`` (``token``
    names the one try) -> ``delivered`` | ``pending`` again (the try failed, ``tries`` <
    the job's attempts) | ``failed`` (given up). A try whose worker died stays
    ``delivering``: it may have been delivered, and it is not tried again.
chords
    A chord (revision 0023): ``id`` (Celery's group id), ``members`` (their occurrence ids
    in group order, JSON), ``body`` (its signature as links JSON). Each member's success
    takes one from ``remaining``; the one reaching 0 makes the body. A member that fails
    for good sets ``failed_at`` (once); the body is then never made. ``closed_at``
    (revision 0025): NULL while its members are still being made (a generator's header,
    each member counted in as made); the body waits for it to be set. Retention deletes a
    done row (body made, or failed) with the last of its members (kernel/upkeep/history.py).

Invariants the database enforces (CHECKs, revision 0002): a status is one of OccurrenceStatus;
a lease (owner + expiry) exists exactly while ``running``; no ``queued``/``retry_wait`` row
carries ``cancel_requested`` (no claim would take it); ``settled_at`` is set exactly in the
final states; counters are non-negative. A partial unique index allows one running exclusive
occurrence per job. A control's state is one of ControlState. A pool's running counter is never
negative and its limit at least 1 (revision 0006). The conditions are :mod:`kernel.db.checks`.
The tables of pools, rate limits and budgets are :mod:`kernel.db.limit_tables`.
"""

from __future__ import annotations

import sqlalchemy as sa

from kernel.db.checks import (
    ADJUDICATION_ASK_CHECKS,
    CONTROL_CHECKS,
    NOTIFICATION_CHECKS,
    OCCURRENCE_CHECKS,
)
from kernel.states import SETTLED

__all__ = [
    "metadata",
    "jobs",
    "occurrences",
    "controls",
    "requeue_grants",
    "operator_requests",
    "events",
    "beats",
    "job_sources",
    "adjudication_asks",
    "notifications",
    "chords",
    "SETTLED_KEY",
    "SETTLED_WHERE",
    "EMPTY_CHORD_WHERE",
]

metadata = sa.MetaData()

# SQLite only aliases the rowid (fast, monotonic) for exactly "INTEGER PRIMARY KEY".
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Ms = sa.BigInteger


def _partial(name: str, *columns: str, where: str, unique: bool = False) -> sa.Index:
    """An index of only the rows ``where`` holds, the same on both dialects."""
    return sa.Index(
        name, *columns, unique=unique, sqlite_where=sa.text(where), postgresql_where=sa.text(where)
    )


jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("id", sa.String(128), primary_key=True),
    sa.Column("revision", sa.Integer, nullable=False),
    sa.Column("digest", sa.String(64), nullable=False),
    sa.Column("spec", sa.Text, nullable=False),
    sa.Column("enabled", sa.Boolean, nullable=False),
    sa.Column("planned", sa.Boolean, nullable=False),
    sa.Column("next_fire_at", Ms),
    sa.Column("next_trigger_key", sa.String(200)),
    sa.Column("after_job", sa.String(128)),
    sa.Column("defined_at", Ms, nullable=False),
    sa.Column("updated_at", Ms, nullable=False),
    sa.Column("scheduled_runs", sa.Integer, nullable=False, server_default="0"),
    sa.Column("schedule_spent", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("plan_error", sa.Text),
    _partial("jobs_due", "next_fire_at", where="enabled AND planned"),
    _partial("jobs_unplanned", "id", where="enabled AND NOT planned"),
    sa.Index("jobs_after", "after_job"),
)

occurrences = sa.Table(
    "occurrences",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.String(128), nullable=False),
    sa.Column("job_revision", sa.Integer, nullable=False),
    # `key:` + an enqueue key of up to 200 characters (revision 0010; SQLite has no lengths).
    sa.Column(
        "trigger_key", sa.String(200).with_variant(sa.String(210), "postgresql"), nullable=False
    ),
    sa.Column("idempotency_key", sa.String(400), nullable=False),
    sa.Column("scheduled_for", Ms, nullable=False),
    sa.Column("status", sa.String(24), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("max_attempts", sa.Integer, nullable=False),
    sa.Column("fence", sa.Integer, nullable=False),
    sa.Column("lease_owner", sa.String(200)),
    sa.Column("lease_expires_at", Ms),
    sa.Column("available_at", Ms, nullable=False),
    sa.Column("dispatched_at", Ms),
    sa.Column("queue", sa.String(64), nullable=False),
    sa.Column("kind", sa.String(64), nullable=False),
    sa.Column("delivery", sa.String(16), nullable=False),
    sa.Column("exclusive", sa.Boolean, nullable=False),
    sa.Column("pool", sa.String(128)),
    sa.Column("definition", sa.Text, nullable=False),
    sa.Column("last_error", sa.Text),
    sa.Column("result", sa.Text),
    sa.Column("skip_reason", sa.String(64)),
    sa.Column("cancel_requested", sa.Boolean, nullable=False),
    sa.Column("parent_id", sa.BigInteger),
    sa.Column("chain_depth", sa.Integer, nullable=False),
    sa.Column("created_at", Ms, nullable=False),
    sa.Column("updated_at", Ms, nullable=False),
    sa.Column("settled_at", Ms),
    sa.Column("approval_due_at", Ms),
    sa.Column("approval_auto", sa.String(8)),
    sa.Column("priority", sa.Integer, nullable=False, server_default="0"),
    sa.Column("checkpoint", sa.Text),
    sa.Column("lost_leases", sa.Integer, nullable=False, server_default="0"),
    sa.Column("max_lost_leases", sa.Integer, nullable=False, server_default="3"),
    sa.Column("links", sa.Text),
    sa.Column("expires_at", Ms),
    sa.Column("rate_limit", sa.String(200)),
    sa.UniqueConstraint("job_id", "trigger_key", name="occurrences_job_trigger"),
    # Partial indexes: a composite (status, ...) index lets PostgreSQL's generic
    # plan turn settle-by-id into a scan of every running row.
    _partial("occurrences_claimable", "available_at", where="status IN ('queued', 'retry_wait')"),
    _partial("occurrences_running", "lease_expires_at", where="status = 'running'"),
    _partial(
        "occurrences_expiring",
        "expires_at",
        where="status IN ('queued', 'retry_wait') AND expires_at IS NOT NULL",
    ),
    # settled_at too: a job's last success, last failure and failures since are seeks
    # (kernel/jobs/health.py).
    sa.Index("occurrences_job", "job_id", "status", "settled_at"),
    sa.Index("occurrences_job_newest", "job_id", "id"),
    # Only what readers ask for (revision 0011): a claim or settle is no HOT update, so it
    # writes an entry into every index whose predicate its new row version meets.
    _partial("occurrences_pool", "pool", where="status = 'running' AND pool IS NOT NULL"),
    _partial("occurrences_adjudication", "updated_at", where="status = 'needs_adjudication'"),
    _partial(
        "occurrences_awaiting_approval", "approval_due_at", where="status = 'awaiting_approval'"
    ),
    # One running exclusive occurrence per job (overlap queue/replace): the data
    # guard two claimers on PostgreSQL cannot both pass (revision 0002).
    _partial(
        "occurrences_one_running_exclusive",
        "job_id",
        unique=True,
        where="status = 'running' AND exclusive",
    ),
    # PostgreSQL stores the same guards spelled OCCURRENCE_CHECKS_POSTGRESQL (revision 0026).
    *(sa.CheckConstraint(condition, name=name) for name, condition in OCCURRENCE_CHECKS),
)

#: Settled rows by status, each status's oldest first (revision 0029): retention's oldest
#: rows of a status (:data:`kernel.statements.history.OLDEST_PRUNABLE`) and the capped
#: count of each final state (kernel/reads.py) are seeks here. Keyed and restricted on
#: ``lower(status)`` (statuses are lower case: the key is the status), which only those
#: readers state: on a plain ``(status, settled_at)`` PostgreSQL served a job's last
#: success (kernel/jobs/health.py) by walking the status's whole history backwards,
#: filtered by job (revision 0024); a query that does not repeat the expression cannot use
#: this index at all, so a job's figures stay on ``occurrences_job``.
SETTLED_KEY = sa.func.lower(occurrences.c.status)
# Literals in the text, whether the index is created or a statement rendered once for the
# driver repeats the predicate (SQLite uses a partial index only for a query that does).
SETTLED_WHERE = SETTLED_KEY.in_([sa.literal_column(f"'{s}'") for s in SETTLED])
sa.Index(
    "occurrences_settled_by_status",
    SETTLED_KEY,
    occurrences.c.settled_at,
    sqlite_where=SETTLED_WHERE,
    postgresql_where=SETTLED_WHERE,
)

controls = sa.Table(
    "controls",
    metadata,
    sa.Column("occurrence_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("state", sa.String(24), nullable=False),
    sa.Column("revision", sa.Integer, nullable=False),
    sa.Column("expected_fence", sa.Integer, nullable=False),
    sa.Column("pause_request_id", sa.String(128)),
    sa.Column("resume_request_id", sa.String(128)),
    sa.Column("safe_points", sa.Text, nullable=False),
    sa.Column("checkpoint", sa.Text),
    sa.Column("requested_at", Ms),
    sa.Column("paused_at", Ms),
    sa.Column("resumed_at", Ms),
    sa.Column("terminal_at", Ms),
    sa.Column("updated_at", Ms, nullable=False),
    sa.Index("controls_state", "state"),
    *(sa.CheckConstraint(condition, name=name) for name, condition in CONTROL_CHECKS),
)

requeue_grants = sa.Table(
    "requeue_grants",
    metadata,
    sa.Column("request_id", sa.String(128), primary_key=True),
    sa.Column("occurrence_id", sa.BigInteger, nullable=False),
    sa.Column("expected_fence", sa.Integer, nullable=False),
    sa.Column("expected_error_code", sa.String(128), nullable=False),
    sa.Column("created_at", Ms, nullable=False),
    sa.Column("claimed_at", Ms),
    sa.Index("requeue_grants_occurrence", "occurrence_id"),
)

operator_requests = sa.Table(
    "operator_requests",
    metadata,
    sa.Column("request_id", sa.String(128), primary_key=True),
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("target", sa.String(200), nullable=False),
    sa.Column("evidence", sa.Text, nullable=False),
    sa.Column("operator", sa.String(128), nullable=False),
    sa.Column("created_at", Ms, nullable=False),
)

events = sa.Table(
    "events",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("at", Ms, nullable=False),
    sa.Column("type", sa.String(64), nullable=False),
    sa.Column("job_id", sa.String(128)),
    sa.Column("occurrence_id", sa.BigInteger),
    sa.Column("fence", sa.Integer),
    sa.Column("data", sa.Text, nullable=False),
    sa.Column("xact", sa.BigInteger),
    sa.Index("events_occurrence", "occurrence_id", "id"),
    sa.Index("events_job", "job_id", "id"),
    # A job's revisions without walking its whole log (revision 0012); only definition
    # events get an entry, so a run's events cost nothing here.
    _partial(
        "events_job_definitions", "job_id", "id", where="type IN ('job_defined', 'job_revised')"
    ),
    _partial("events_xact", "xact", where="xact IS NOT NULL"),
)

beats = sa.Table(
    "beats",
    metadata,
    sa.Column("id", sa.String(200), primary_key=True),
    sa.Column("host", sa.String(200), nullable=False),
    sa.Column("interval_s", sa.Float, nullable=False),
    sa.Column("started_at", Ms, nullable=False),
    sa.Column("last_tick_at", Ms, nullable=False),
)

job_sources = sa.Table(
    "job_sources",
    metadata,
    sa.Column("job_id", sa.String(128), primary_key=True),
    sa.Column("source", sa.String(64), nullable=False),
    sa.Column("name", sa.String(1024), nullable=False),
    sa.Column("retired_at", Ms),
)

adjudication_asks = sa.Table(
    "adjudication_asks",
    metadata,
    sa.Column("occurrence_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("fence", sa.Integer, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("token", sa.String(64), nullable=False),
    sa.Column("asker", sa.String(200), nullable=False),
    sa.Column("asks", sa.Integer, nullable=False),
    sa.Column("asked_at", Ms, nullable=False),
    sa.Column("ask_deadline", Ms, nullable=False),
    *(sa.CheckConstraint(condition, name=name) for name, condition in ADJUDICATION_ASK_CHECKS),
)

notifications = sa.Table(
    "notifications",
    metadata,
    sa.Column("id", Id, primary_key=True, autoincrement=True),
    sa.Column("occurrence_id", sa.BigInteger, nullable=False),
    sa.Column("fence", sa.Integer, nullable=False),
    sa.Column("job_id", sa.String(128), nullable=False),
    sa.Column("event", sa.String(32), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("tries", sa.Integer, nullable=False),
    sa.Column("next_at", Ms, nullable=False),
    sa.Column("token", sa.String(64)),
    sa.Column("target", sa.Text, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("last_error", sa.Text),
    sa.Column("created_at", Ms, nullable=False),
    sa.Column("updated_at", Ms, nullable=False),
    sa.UniqueConstraint("occurrence_id", "fence", "event", name="notifications_run_event"),
    _partial("notifications_due", "next_at", where="state = 'pending'"),
    *(sa.CheckConstraint(condition, name=name) for name, condition in NOTIFICATION_CHECKS),
)

#: A chord with an empty header has no member to be pruned with: retention finds it by
#: age, repeating this predicate of ``chords_empty`` (SQLite seeks a partial index only then).
EMPTY_CHORD_WHERE = "members = '[]'"
chords = sa.Table(
    "chords",
    metadata,
    sa.Column("id", sa.String(200), primary_key=True),
    sa.Column("members", sa.Text, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("remaining", sa.Integer, nullable=False),
    sa.Column("failed_at", Ms),
    sa.Column("created_at", Ms, nullable=False),
    sa.Column("closed_at", Ms),
    _partial("chords_empty", "closed_at", where=EMPTY_CHORD_WHERE),
)
