"""The jobs and the invariants of the model-based test across features
(tests/kernel/test_feature_model.py, issue 39).

Jobs are drawn with the features users combine: schedule bounds (``max_runs``, ``end``),
history limits, overlap policies, delivery, approval gates, a pool, ``notify`` and a
chained job. The invariants read the kernel's tables (:func:`snapshot`) and its blocker
read, never a model of what should have happened, so they hold whatever the rules did:
each is one function raising AssertionError with the ids that break it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from hypothesis import strategies as st

from kernel import Kernel
from kernel.db.schema import events, jobs, metadata, notifications, occurrences
from kernel.records import loads
from kernel.states import UNSETTLED

#: Scheduled jobs, and the job chained after one of them.
SCHEDULED = ("a", "b", "c")
CHAINED = "d"
POOL = "shared"
LEASE_S = 30.0
#: Every unsettled status but ``running``: each waits for something the blocker read names.
WAITING = frozenset(UNSETTLED) - {"running"}
#: The blockers that name the occurrence waited for.
WAITS_FOR_ANOTHER = ("behind", "awaiting_adjudication")
#: Statuses of a run that a job's ``notify`` subscribes to, and whose notification the
#: invariant counts: written by the transition that made the status, whoever made it.
NOTIFIED_STATUSES = ("dead_letter", "needs_adjudication")
_NOTIFY_ON = (["dead_letter"], ["dead_letter", "failed"], ["needs_adjudication", "dead_letter"])


def _base(job_id: str) -> dict[str, Any]:
    return {
        "id": job_id,
        "kind": "callable",
        "payload": {"callable": "jobs.sample:run"},
        "lease": LEASE_S,
        "retry": {"backoff": "10s", "factor": 1, "max": "10s", "jitter": 0},
    }


@st.composite
def features(draw: st.DrawFn) -> dict[str, Any]:
    """The fields every job may carry: overlap, delivery, attempts, lost leases, approval,
    pool, history, notify."""
    spec: dict[str, Any] = {
        "overlap": draw(st.sampled_from(["allow", "skip", "queue"])),
        "delivery": draw(st.sampled_from(["at-least-once", "at-most-once"])),
        "max_attempts": draw(st.integers(1, 2)),
        "max_lost_leases": draw(st.integers(0, 1)),
    }
    if spec["overlap"] == "queue":
        spec["max_queued"] = 2
    if draw(st.booleans()):
        spec["approval"] = {
            "timeout": "5m",
            "auto": draw(st.sampled_from(["approve", "reject"])),
            "max_pending": 2,
        }
    if draw(st.booleans()):
        spec["pool"] = POOL
    if draw(st.booleans()):
        spec["history"] = {"succeeded": 1}
    if draw(st.booleans()):
        spec["notify"] = {
            "on": draw(
                st.sampled_from(
                    [
                        ["dead_letter"],
                        ["dead_letter", "failed"],
                        ["needs_adjudication", "dead_letter"],
                    ]
                )
            ),
            "task": "tests.notified",
        }
    return spec


@st.composite
def scheduled_spec(draw: st.DrawFn, job_id: str, start: datetime) -> dict[str, Any]:
    """A job firing every minute, maybe bounded by ``max_runs`` or an ``end``."""
    schedule: dict[str, Any] = {"every": 60}
    if draw(st.booleans()):
        schedule["max_runs"] = draw(st.integers(1, 4))
    if draw(st.booleans()):
        schedule["end"] = (start + timedelta(minutes=draw(st.integers(2, 8)))).isoformat()
    return {**_base(job_id), **draw(features()), "schedule": schedule}


@st.composite
def chained_spec(draw: st.DrawFn) -> dict[str, Any]:
    """The job fired when one of the scheduled jobs settles."""
    after = {
        "job": draw(st.sampled_from(SCHEDULED)),
        "on": draw(st.sampled_from(["success", "failure", "complete"])),
    }
    return {**_base(CHAINED), **draw(features()), "after": after}


@dataclass(frozen=True)
class Row:
    """What the invariants read of an occurrence."""

    id: int
    job_id: str
    status: str
    fence: int
    lease_owner: str | None
    lease_expires_at: int | None
    pool: str | None
    notify: tuple[str, ...]


@dataclass
class Snapshot:
    """The tables after a step: occurrences by id, the last event id, notifications by
    (occurrence, fence, event), each job's enabled flag."""

    rows: dict[int, Row] = field(default_factory=dict)
    last_event: int = 0
    notified: dict[tuple[int, int, str], int] = field(default_factory=dict)
    enabled: dict[str, bool] = field(default_factory=dict)


def _notify_of(definition: str) -> tuple[str, ...]:
    notify = loads(definition).get("notify")
    return tuple(notify["on"]) if notify else ()


def snapshot(kernel: Kernel) -> Snapshot:
    """Read the tables the invariants need, in one connection."""
    o = occurrences
    with kernel.engine.connect() as conn:
        rows = conn.execute(
            sa.select(
                o.c.id,
                o.c.job_id,
                o.c.status,
                o.c.fence,
                o.c.lease_owner,
                o.c.lease_expires_at,
                o.c.pool,
                o.c.definition,
            )
        ).all()
        last = conn.execute(sa.select(sa.func.coalesce(sa.func.max(events.c.id), 0))).scalar()
        n = notifications
        counted = conn.execute(
            sa.select(n.c.occurrence_id, n.c.fence, n.c.event, sa.func.count()).group_by(
                n.c.occurrence_id, n.c.fence, n.c.event
            )
        ).all()
        enabled = conn.execute(sa.select(jobs.c.id, jobs.c.enabled)).all()
    return Snapshot(
        rows={
            r.id: Row(
                r.id,
                r.job_id,
                r.status,
                r.fence,
                r.lease_owner,
                r.lease_expires_at,
                r.pool,
                _notify_of(r.definition),
            )
            for r in rows
        },
        last_event=int(last or 0),
        notified={(c[0], c[1], c[2]): int(c[3]) for c in counted},
        enabled={j.id: bool(j.enabled) for j in enabled},
    )


def waiting_has_a_blocker(kernel: Kernel, now: Snapshot, disabled_by_operator: set[str]) -> None:
    """I12: every unsettled occurrence not running is claimable now or names what holds it,
    and what it names can move: the occurrence it waits for is unsettled, a full pool
    has a run holding it, a disabled job was disabled by an operator (a retired job's
    firings still run)."""
    waiting = [r.id for r in now.rows.values() if r.status in WAITING]
    found = kernel.blockers(waiting)
    for occ_id in waiting:
        row, blocker = now.rows[occ_id], found.get(occ_id)
        assert blocker is not None, f"occurrence {occ_id} ({row.status}) waits with no blocker"
        if blocker.kind in WAITS_FOR_ANOTHER and blocker.waits_for != occ_id:
            other = now.rows.get(blocker.waits_for or -1)
            assert other is not None and other.status in UNSETTLED, (
                f"occurrence {occ_id} waits for {blocker.waits_for}, which is "
                f"{other.status if other else 'gone'}: {blocker.text}"
            )
        if blocker.kind == "pool_full":
            holders = [
                r.id for r in now.rows.values() if r.status == "running" and r.pool == row.pool
            ]
            assert holders, f"occurrence {occ_id}: pool {row.pool} is full with no run in it"
        if blocker.kind == "job_disabled":
            assert row.job_id in disabled_by_operator, (
                f"occurrence {occ_id} is held by its job's retirement: {blocker.text}"
            )


def leases_hold(before: Snapshot, now: Snapshot) -> None:
    """I2: fences only grow; a running occurrence has one owner and a lease expiry."""
    for row in now.rows.values():
        old = before.rows.get(row.id)
        assert old is None or row.fence >= old.fence, f"occurrence {row.id}: fence went back"
        if row.status == "running":
            assert row.lease_owner and row.lease_expires_at, (
                f"occurrence {row.id}: running unleased"
            )


def transitions_logged(kernel: Kernel, before: Snapshot, now: Snapshot) -> None:
    """I3: an occurrence made, or moved to another status or fence, has an event of its own
    appended since ``before``."""
    moved = {
        r.id
        for r in now.rows.values()
        if (old := before.rows.get(r.id)) is None or (old.status, old.fence) != (r.status, r.fence)
    }
    if not moved:
        return
    with kernel.engine.connect() as conn:
        logged = set(
            conn.execute(
                sa.select(events.c.occurrence_id).where(
                    events.c.id > before.last_event, events.c.occurrence_id.in_(moved)
                )
            ).scalars()
        )
    assert moved <= logged, f"occurrences {sorted(moved - logged)} changed with no event"


def unresolved_kept(unresolved: Iterable[int], now: Snapshot) -> None:
    """SPEC §6: a dead letter or an adjudication seen is never pruned; an operator
    resolves it, it does not vanish."""
    gone = sorted(i for i in unresolved if i not in now.rows)
    assert not gone, f"unresolved occurrences {gone} were pruned"


def notified_once(now: Snapshot, statuses: Iterable[str] = NOTIFIED_STATUSES) -> None:
    """I13: every run that settled in one of ``statuses`` its job subscribes to has
    exactly one notification of that event (whoever settled it: worker, Beat, claim,
    operator)."""
    missing: list[str] = []
    for row in now.rows.values():
        if row.status in statuses and row.status in row.notify:
            count = now.notified.get((row.id, row.fence, row.status), 0)
            if count != 1:
                missing.append(f"{row.id}@{row.fence} {row.status}: {count}")
    assert not missing, f"notifications per run, expected 1 each: {missing}"


def new_unresolved(now: Snapshot) -> set[int]:
    """Dead letters and adjudications in ``now``."""
    return {r.id for r in now.rows.values() if r.status in ("dead_letter", "needs_adjudication")}


def created_within_bounds(
    schedule: Mapping[str, Any], made_before: int, made: list[tuple[int, datetime]]
) -> None:
    """I14: a tick makes no firing past ``max_runs`` (counting every firing made before,
    pruned or not) and none scheduled after ``end``."""
    bound = schedule.get("max_runs")
    if bound is not None:
        assert made_before + len(made) <= max(bound, made_before), (
            f"{made_before} made before, {len(made)} now: max_runs {bound} overrun"
        )
    if "end" in schedule:
        end = datetime.fromisoformat(schedule["end"])
        late = [occ for occ, at in made if at > end]
        assert not late, f"occurrences {late} scheduled after end {end}"


def wipe(url: str) -> None:
    """Empty every kernel table (the schema stays migrated): each example starts clean."""
    kernel = Kernel.open(url)
    try:
        with kernel.engine.begin() as conn:
            for table in reversed(metadata.sorted_tables):
                conn.execute(table.delete())
    finally:
        kernel.close()
