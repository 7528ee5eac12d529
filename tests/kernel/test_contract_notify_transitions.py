"""A job's notification is written by the change that causes it, whoever makes it (issue 39
item 4): a worker's failed settle, Beat's lease expiry, a claim that meets an expired
lease, an operator's verdict, the watchdog's finding. One row per run and event, in the
change's own transaction: a change rolled back leaves none."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest
import sqlalchemy as sa

from kernel.db.schema import notifications
from kernel.errors import InvalidArgument
from kernel.occurrences import lease_expiry, verdicts
from kernel.states import OccurrenceStatus as S
from kernel.transaction.tx import Tx
from kernel.upkeep import watchdog

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness

NOTIFY = {"task": "hooks.notified"}


def _rows(k: Harness, occ_id: int) -> list[tuple[int, str, str]]:
    """The occurrence's notifications: (fence, event, state), in order."""
    query = (
        sa.select(notifications.c.fence, notifications.c.event, notifications.c.state)
        .where(notifications.c.occurrence_id == occ_id)
        .order_by(notifications.c.id)
    )
    with k.kernel.engine.connect() as conn:
        return [tuple(row) for row in conn.execute(query)]  # type: ignore[misc]


class _RolledBack(Exception):
    pass


def _rolled_back(k: Harness, change: Callable[[Tx], object], occ_id: int) -> int:
    """Make ``change`` in a kernel transaction, count the occurrence's notifications in
    it, then roll it back; the count seen inside."""
    seen: list[int] = []

    def run(tx: Tx) -> None:
        change(tx)
        where = notifications.c.occurrence_id == occ_id
        seen.append(tx.conn.execute(sa.select(sa.func.count()).where(where)).scalar_one())
        raise _RolledBack

    with pytest.raises(_RolledBack):
        k.kernel._session.run(run)
    return seen[0]


def test_beat_expiring_a_lease_dead_letters_and_notifies_once(k: Harness) -> None:
    occ_id = k.running(max_lost_leases=0, notify=NOTIFY).occurrence.id
    k.clock.advance(31)
    assert _rolled_back(k, lambda tx: lease_expiry.expire_leases(tx, 10), occ_id) == 1
    assert _rows(k, occ_id) == []
    assert k.kernel.get_occurrence(occ_id).status == S.RUNNING  # rolled back with it
    assert k.kernel.expire_leases()["dead_letter"] == 1
    assert k.kernel.expire_leases()["dead_letter"] == 0
    assert _rows(k, occ_id) == [(1, "dead_letter", "pending")]
    body = k.kernel.due_notifications()[0].body
    assert (body["status"], body["error"]["code"]) == ("dead_letter", "POISON_PILL")


def test_a_claim_meeting_an_expired_lease_notifies_its_dead_letter(k: Harness) -> None:
    occ_id = k.running(max_lost_leases=0, notify=NOTIFY).occurrence.id
    k.clock.advance(31)
    assert k.kernel.claim(occ_id, owner="w2", lease=30) is None
    assert k.kernel.get_occurrence(occ_id).status == S.DEAD_LETTER
    assert k.kernel.expire_leases()["dead_letter"] == 0
    assert _rows(k, occ_id) == [(1, "dead_letter", "pending")]


def test_adjudication_is_notified_and_so_is_the_abandon_that_ends_it(k: Harness) -> None:
    on = {**NOTIFY, "on": ["dead_letter", "needs_adjudication"]}
    occ_id = k.running(delivery="at-most-once", max_attempts=1, notify=on).occurrence.id
    k.clock.advance(31)
    assert k.kernel.expire_leases()["needs_adjudication"] == 1
    assert _rows(k, occ_id) == [(1, "needs_adjudication", "pending")]

    def abandon(tx: Tx) -> None:
        verdicts.adjudicate(tx, occ_id, decision="abandon", request_id="r0", operator="ops")

    assert _rolled_back(k, abandon, occ_id) == 2
    assert len(_rows(k, occ_id)) == 1
    k.kernel.adjudicate(occ_id, decision="abandon", request_id="r1", operator="ops")
    k.kernel.adjudicate(occ_id, decision="abandon", request_id="r1", operator="ops")  # replay
    assert _rows(k, occ_id) == [(1, "needs_adjudication", "pending"), (1, "dead_letter", "pending")]
    recorded = [
        e for e in k.kernel.events(occurrence_id=occ_id) if e.type == "notification_recorded"
    ]
    assert [e.data["notify_event"] for e in recorded] == ["needs_adjudication", "dead_letter"]


def test_a_worker_settle_notifies_in_its_own_transaction(k: Harness) -> None:
    on = {**NOTIFY, "on": ["failed", "needs_adjudication"]}
    retried = k.running("retried", max_attempts=2, notify=on)
    k.kernel.fail(retried.occurrence.id, owner="w1", fence=1, code="X", message="x")
    unknown = k.running("unknown", delivery="at-most-once", notify=on)
    k.kernel.fail(
        unknown.occurrence.id, owner="w1", fence=1, code="X", message="x", effect="unknown"
    )
    quiet = k.running("quiet", notify={**NOTIFY, "on": ["needs_adjudication"]})
    k.kernel.fail(quiet.occurrence.id, owner="w1", fence=1, code="X", message="x", retryable=False)
    assert _rows(k, retried.occurrence.id) == [(1, "failed", "pending")]
    assert _rows(k, unknown.occurrence.id) == [(1, "needs_adjudication", "pending")]
    assert _rows(k, quiet.occurrence.id) == []  # a dead letter it did not subscribe to
    assert [n.id for n in k.kernel.run_notifications(retried.occurrence.id, 1)] != []


def test_the_watchdogs_findings_are_notified_with_their_events(k: Harness) -> None:
    over = k.running("over", timeout="10s", lease=600, notify={**NOTIFY, "on": ["watchdog"]})
    k.define("paused", notify={**NOTIFY, "on": ["stranded"]})
    # Stranded: claimable, nothing holds it, no claim took it.
    stranded = k.fire("paused").created[0]
    k.clock.advance(120)

    def record(tx: Tx) -> dict[str, Any]:
        return watchdog.record_findings(tx, 60_000)

    assert _rolled_back(k, record, over.occurrence.id) == 1
    assert _rows(k, over.occurrence.id) == []
    found = k.kernel.record_watchdog(grace=60)
    assert [r["occurrence_id"] for r in found["stranded"]] == [stranded]
    k.kernel.record_watchdog(grace=60)  # each finding once
    assert _rows(k, over.occurrence.id) == [(1, "overrun", "pending")]
    assert _rows(k, stranded) == [(0, "stranded", "pending")]


def test_on_names_what_notifies(k: Harness) -> None:
    with pytest.raises(InvalidArgument) as refused:
        k.define("job", notify={**NOTIFY, "on": ["late"]})
    assert refused.value.field == "notify.on[0]"
    for name in ("dead_letter", "failed", "needs_adjudication", "stranded", "watchdog"):
        assert name in refused.value.message
