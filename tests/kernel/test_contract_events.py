"""The event log, reads, the dispatch pump, retention and status (I3, SPEC §2.3, §6)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from kernel.errors import InvalidArgument, LeaseLost

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness


def test_every_change_appends_its_events_and_a_refused_write_appends_none(k: Harness) -> None:
    claim = k.running(max_attempts=2)
    occ_id = claim.occurrence.id
    k.kernel.fail(occ_id, owner="w1", fence=1, code="E1", message="first")
    k.clock.advance(10)
    k.kernel.claim(occ_id, owner="w2", lease=30)
    k.kernel.renew(occ_id, owner="w2", fence=2, lease=30)
    before = k.kernel.events(limit=1000)
    with pytest.raises(LeaseLost):
        k.kernel.succeed(occ_id, owner="w1", fence=1)
    assert k.kernel.events(limit=1000) == before
    k.kernel.succeed(occ_id, owner="w2", fence=2, result="ok")

    log = [(e.type, e.fence) for e in k.kernel.events(occurrence_id=occ_id)]
    assert log == [
        ("occurrence_created", None),
        ("occurrence_claimed", 1),
        ("occurrence_retry_wait", 1),
        ("occurrence_claimed", 2),
        ("occurrence_succeeded", 2),
    ]
    events = k.kernel.events(occurrence_id=occ_id)
    assert all(e.job_id == "job" for e in events)
    assert events[2].data["retry_at"] == int((k.clock.now.timestamp()) * 1000)
    assert events[2].data["error"] == {"code": "E1", "message": "first"}
    assert events[4].at == k.clock.now
    ids = [e.id for e in k.kernel.events(limit=1000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_events_page_by_cursor_job_and_occurrence(k: Harness) -> None:
    first, second = k.occurrences("a", 2)
    [other] = k.occurrences("b")
    for occ_id in (first, second, other):
        k.kernel.claim(occ_id, owner="w1", lease=30)
    everything = k.kernel.events(limit=1000)
    pages, cursor = [], 0
    while page := k.kernel.events(after_id=cursor, limit=3):
        assert len(page) <= 3
        pages.extend(page)
        cursor = page[-1].id
    assert pages == everything

    by_job = k.kernel.events(job_id="a", limit=1000)
    assert {e.job_id for e in by_job} == {"a"} and len(
        by_job
    ) == 5  # defined + 2 x (created, claimed)
    by_occurrence = k.kernel.events(occurrence_id=second, limit=1000)
    assert [e.type for e in by_occurrence] == ["occurrence_created", "occurrence_claimed"]
    later = k.kernel.events(job_id="a", after_id=by_job[2].id, limit=1000)
    assert later == by_job[3:]
    assert k.kernel.events(after_id=everything[-1].id) == []
    for limit in (0, 1001):
        with pytest.raises(InvalidArgument):
            k.kernel.events(limit=limit)


def test_events_filter_by_type_and_time_newest_first_too(k: Harness) -> None:
    [first] = k.occurrences("a")
    k.clock.advance(60)
    since = k.clock.now
    [second] = k.occurrences("a")
    k.kernel.claim(second, owner="w1", lease=30)
    created = k.kernel.events(types=["occurrence_created"], limit=1000)
    assert [e.occurrence_id for e in created] == [first, second]
    recent = k.kernel.events(job_id="a", since=since, limit=1000)
    assert [(e.type, e.occurrence_id) for e in recent] == [
        ("occurrence_created", second),
        ("occurrence_claimed", second),
    ]
    newest = k.kernel.events(types=["occurrence_created", "occurrence_claimed"],
                             before_id=2**62, limit=2)  # fmt: skip
    assert [e.type for e in newest] == ["occurrence_created", "occurrence_claimed"]
    assert {e.occurrence_id for e in newest} == {second}
    assert k.kernel.events(since=k.clock.now + timedelta(seconds=1), limit=10) == []


def test_list_occurrences_filters_and_pages_newest_first(k: Harness) -> None:
    ids = k.occurrences("a", 5)
    k.kernel.claim(ids[0], owner="w1", lease=30)
    newest = k.kernel.list_occurrences(job_id="a", limit=2)
    assert [o.id for o in newest] == [ids[4], ids[3]]
    older = k.kernel.list_occurrences(job_id="a", limit=10, before_id=newest[-1].id)
    assert [o.id for o in older] == [ids[2], ids[1], ids[0]]
    assert [o.id for o in k.kernel.list_occurrences(statuses=["running"])] == [ids[0]]
    assert k.kernel.active_occurrences("a")[-1].id == ids[0]
    with pytest.raises(InvalidArgument) as bad:
        k.kernel.list_occurrences(statuses=["done"])
    assert bad.value.field == "status"


def test_runtime_controls_is_bounded_filtered_and_payload_free(k: Harness) -> None:
    claims = []
    for n in range(3):
        claims.append(
            k.running(f"job-{n}", payload={"callable": "jobs.sample:run", "args": ["secret"]})
        )
        k.clock.advance(1)
    ids = [c.occurrence.id for c in claims]
    k.kernel.request_pause(
        ids[0], expected_fence=1, request_id="p", safe_points=["before_execute"], operator="ops"
    )
    k.occurrences("idle")
    rows = k.kernel.runtime_controls()
    # Most recently changed first: the pause request is the latest change.
    assert [(r["id"], r["state"]) for r in rows] == [
        (ids[0], "pause_requested"),
        (ids[2], "running"),
        (ids[1], "running"),
    ]
    assert set(rows[0]) == {
        "id",
        "job_id",
        "kind",
        "status",
        "fence",
        "attempt",
        "lease_expires_at",
        "state",
        "control_revision",
        "updated_at",
    }
    assert "secret" not in repr(rows) and "w1" not in repr(rows)
    assert [r["id"] for r in k.kernel.runtime_controls(statuses=["pause_requested"])] == [ids[0]]
    assert [
        r["id"] for r in k.kernel.runtime_controls(statuses=["running"], kinds=["callable"])
    ] == [
        ids[2],
        ids[1],
    ]
    assert k.kernel.runtime_controls(kinds=["shell"]) == []
    assert len(k.kernel.runtime_controls(limit=2)) == 2
    with pytest.raises(InvalidArgument):
        k.kernel.runtime_controls(statuses=["dead_letter"])
    with pytest.raises(InvalidArgument):
        k.kernel.runtime_controls(limit=0)


def test_runtime_controls_is_capped_at_200(k: Harness) -> None:
    created = k.occurrences("many", 201, max_queued=1000)
    for occ_id in created:
        assert k.kernel.claim(occ_id, owner="w1", lease=30) is not None
    assert len(k.kernel.runtime_controls(limit=100_000)) == 200


def test_an_expired_lease_is_hinted_again_at_once(k: Harness) -> None:
    # The hint that led to the claim predates the lease's expiry: re-hint without waiting
    # out the (longer) re-hint interval, so a crashed worker's run is picked up promptly.
    [occ] = k.occurrences("a", 1)
    assert [h.occurrence_id for h in k.kernel.dispatch_batch(rehint_after=300)] == [occ]
    k.kernel.claim(occ, owner="w1", lease=5)
    k.clock.advance(4)
    assert k.kernel.dispatch_batch(rehint_after=300) == []
    k.clock.advance(1)
    assert [h.occurrence_id for h in k.kernel.dispatch_batch(rehint_after=300)] == [occ]
    assert k.kernel.dispatch_batch(rehint_after=300) == []


def test_dispatch_hints_claimable_work_once_per_interval(k: Harness) -> None:
    first, second = k.occurrences("a", 2, queue="reports")
    hints = k.kernel.dispatch_batch(limit=1)
    assert [(h.occurrence_id, h.job_id, h.queue, h.kind) for h in hints] == [
        (first, "a", "reports", "callable")
    ]
    assert k.kernel.get_occurrence(first).dispatched_at == k.clock.now
    assert [h.occurrence_id for h in k.kernel.dispatch_batch()] == [second]
    assert k.kernel.dispatch_batch() == []
    k.clock.advance(29)
    assert k.kernel.dispatch_batch(rehint_after=30) == []
    k.clock.advance(1)
    assert [h.occurrence_id for h in k.kernel.dispatch_batch(rehint_after=30)] == [first, second]

    # Running work is hinted again only once its at-least-once lease has expired.
    k.kernel.claim(first, owner="w1", lease=30)
    k.kernel.cancel(second, request_id="c", operator="ops")
    k.clock.advance(30)
    assert [h.occurrence_id for h in k.kernel.dispatch_batch()] == [first]
    # A retry is hinted when its backoff has passed, not before.
    k.kernel.claim(first, owner="w2", lease=30)
    k.kernel.fail(first, owner="w2", fence=2, code="E", message="retry")
    assert k.kernel.dispatch_batch() == []
    k.clock.advance(20)
    assert [h.occurrence_id for h in k.kernel.dispatch_batch()] == [first]


def test_prune_drops_old_settled_history_and_keeps_unresolved_work(k: Harness) -> None:
    done, cancelled, dead, waiting = k.occurrences("job", 4, max_attempts=1)
    claim = k.kernel.claim(done, owner="w1", lease=30)
    assert claim is not None
    k.kernel.succeed(done, owner="w1", fence=1)
    k.kernel.cancel(cancelled, request_id="c", operator="ops")
    k.kernel.claim(dead, owner="w1", lease=30)
    k.kernel.fail(dead, owner="w1", fence=1, code="E", message="no")
    k.clock.advance(86400 * 8)
    [recent] = k.occurrences("job")
    k.kernel.claim(recent, owner="w1", lease=30)
    k.kernel.succeed(recent, owner="w1", fence=1)

    pruned = k.kernel.prune(older_than=timedelta(days=7))
    assert pruned == {"occurrences": 2, "events": 5}
    left = {o.id for o in k.kernel.list_occurrences(job_id="job")}
    assert left == {dead, waiting, recent}
    assert k.kernel.events(occurrence_id=done) == []
    assert k.kernel.events(occurrence_id=dead) != []
    assert k.kernel.events(limit=1000)[-1].type == "history_pruned"
    assert k.kernel.prune(older_than=timedelta(days=7)) == {"occurrences": 0, "events": 0}


def test_status_counts_states_expiring_leases_and_the_oldest_claimable(k: Harness) -> None:
    queued, running, paused = k.occurrences("job", 3)
    k.clock.advance(5)
    k.kernel.claim(running, owner="w1", lease=8)
    k.kernel.claim(paused, owner="w1", lease=60)
    k.kernel.request_pause(
        paused, expected_fence=1, request_id="p", safe_points=["before_execute"], operator="ops"
    )
    k.kernel.ack_pause(
        paused,
        owner="w1",
        fence=1,
        request_id="p",
        expected_revision=None,
        safe_point="before_execute",
        checkpoint=None,
    )
    status = k.kernel.status()
    assert status["counts"]["queued"] == 1 and status["counts"]["running"] == 1
    # The paused one is counted once, as paused (its row stays retry_wait).
    assert status["counts"]["retry_wait"] == 0 and status["counts"]["succeeded"] == 0
    assert status["counts"]["paused"] == status["paused"] == 1
    assert status["leases_expiring_10s"] == 1
    assert status["oldest_claimable_age_ms"] == 5000
    assert status["now_ms"] == int(k.clock.now.timestamp() * 1000)
    k.kernel.cancel(queued, request_id="c", operator="ops")
    assert k.kernel.status()["oldest_claimable_age_ms"] is None
