"""A routed run that ends without its worker's answer owes that end to Celery's result
backend (issue 40): the kernel writes the owed row (target ``result_backend``, event
``result``) in the transaction of the end, whoever makes it, and only for a keyed
enqueue of a task (the id its caller's AsyncResult has). A worker's own settle of a
failure writes nothing: its body already wrote the backend."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest
import sqlalchemy as sa

from kernel.db.schema import notifications
from kernel.occurrences import control, lease_expiry, verdicts
from kernel.states import OccurrenceStatus as S
from kernel.transaction.tx import Tx

if TYPE_CHECKING:
    from kernel.reports import Claim
    from tests.kernel.conftest import Harness

TASK = "proj.charge"


def _owed(k: Harness, occ_id: int) -> list[tuple[int, str, str, str]]:
    """The occurrence's owed results: (fence, status in the body, error code, state)."""
    query = (
        sa.select(notifications)
        .where(notifications.c.occurrence_id == occ_id, notifications.c.event == "result")
        .order_by(notifications.c.id)
    )
    with k.kernel.engine.connect() as conn:
        rows = list(conn.execute(query))
    assert all(json.loads(row.target)["result_backend"] is True for row in rows)
    bodies = [json.loads(row.body) for row in rows]
    return [
        (row.fence, body["status"], (body["error"] or {}).get("code", ""), row.state)
        for row, body in zip(rows, bodies, strict=True)
    ]


class _RolledBack(Exception):
    pass


def _count_inside(k: Harness, change: Callable[[Tx], object], occ_id: int) -> int:
    """Owed rows of the occurrence seen inside the change's transaction, rolled back."""
    seen: list[int] = []

    def run(tx: Tx) -> None:
        change(tx)
        where = sa.and_(notifications.c.occurrence_id == occ_id, notifications.c.event == "result")
        seen.append(tx.conn.execute(sa.select(sa.func.count()).where(where)).scalar_one())
        raise _RolledBack

    with pytest.raises(_RolledBack):
        k.kernel._session.run(run)
    return seen[0]


def _routed(k: Harness, key: str = "t-1", **settings: object) -> int:
    return k.kernel.enqueue(task=TASK, key=key, settings=settings).occurrence_id


def _claimed(k: Harness, occ_id: int) -> Claim:
    claim = k.kernel.claim(occ_id, owner="w1", lease=30)
    assert claim is not None
    return claim


def test_a_lease_lost_for_good_owes_its_dead_letter_in_the_expirys_transaction(
    k: Harness,
) -> None:
    occ_id = _routed(k, max_lost_leases=0)
    _claimed(k, occ_id)
    k.clock.advance(31)
    assert _count_inside(k, lambda tx: lease_expiry.expire_leases(tx, 10), occ_id) == 1
    assert _owed(k, occ_id) == []
    assert k.kernel.expire_leases()["dead_letter"] == 1
    assert _owed(k, occ_id) == [(1, "dead_letter", "POISON_PILL", "pending")]


def test_an_abandon_of_an_at_most_once_run_owes_its_dead_letter(k: Harness) -> None:
    occ_id = _routed(k, delivery="at-most-once")
    _claimed(k, occ_id)
    k.clock.advance(31)
    assert k.kernel.expire_leases()["needs_adjudication"] == 1
    assert _owed(k, occ_id) == []  # not an end: an operator decides

    def abandon(tx: Tx) -> None:
        verdicts.adjudicate(tx, occ_id, decision="abandon", request_id="r0", operator="ops")

    assert _count_inside(k, abandon, occ_id) == 1
    k.kernel.adjudicate(occ_id, decision="abandon", request_id="r1", operator="ops")
    k.kernel.adjudicate(occ_id, decision="abandon", request_id="r1", operator="ops")  # replay
    [(fence, status, _code, state)] = _owed(k, occ_id)
    assert (fence, status, state) == (1, "dead_letter", "pending")


def test_a_cancel_owes_the_runs_end_whether_queued_or_stopped_by_its_worker(
    k: Harness,
) -> None:
    queued = _routed(k, "queued")
    assert _count_inside(k, lambda tx: control.request_cancel(tx, queued, reason="t"), queued) == 1
    k.kernel.cancel(queued, request_id="c1", operator="ops")
    assert _owed(k, queued) == [(0, "cancelled", "", "pending")]
    running = _routed(k, "running")
    claim = _claimed(k, running)
    k.kernel.cancel(running, request_id="c2", operator="ops")
    assert _owed(k, running) == []  # only asked: its worker stops it
    k.kernel.cancelled(running, owner="w1", fence=claim.fence)
    assert [row[:2] for row in _owed(k, running)] == [(1, "cancelled")]


def test_a_workers_own_failure_and_unkeyed_or_other_runs_owe_nothing(k: Harness) -> None:
    failed = _routed(k, "failed", max_attempts=1)
    claim = _claimed(k, failed)
    k.kernel.fail(failed, owner="w1", fence=claim.fence, code="X", message="x")
    assert k.kernel.get_occurrence(failed).status == S.DEAD_LETTER
    assert _owed(k, failed) == []  # its body wrote FAILURE itself
    unkeyed = k.kernel.enqueue(task=TASK).occurrence_id
    k.kernel.cancel(unkeyed, request_id="c3", operator="ops")
    assert _owed(k, unkeyed) == []  # no caller holds its id
    fired = k.occurrences("job", 1)[0]  # a callable job's firing
    k.kernel.cancel(fired, request_id="c4", operator="ops")
    assert _owed(k, fired) == []


def test_a_run_past_its_start_deadline_owes_its_skip_whoever_meets_it(k: Harness) -> None:
    by_beat = k.kernel.enqueue(task=TASK, key="beat", expires=10).occurrence_id
    by_claim = k.kernel.enqueue(task=TASK, key="claim", expires=10).occurrence_id
    k.clock.advance(11)
    assert _count_inside(k, lambda tx: lease_expiry.skip_expired(tx), by_beat) == 1
    assert k.kernel.claim(by_claim, owner="w1", lease=30) is None
    assert k.kernel.skip_expired() == 1
    for occ_id in (by_beat, by_claim):
        assert k.kernel.get_occurrence(occ_id).status == S.SKIPPED
        assert _owed(k, occ_id) == [(0, "skipped", "", "pending")]
