"""Celery's revoke of a routed run, carried out by the kernel (issue 40): by the task id its
caller holds (the run's key) or by the stamps its call set. A run not started is
cancelled (its end owed to the result backend as REVOKED); a running one is asked to stop
only with ``terminate``; a revoke is idempotent, so every worker of a broadcast may carry
it out; ids and stamps of no routed run change nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernel.occurrences.operator import stamps_match

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness

TASK = "proj.charge"


def _routed(k: Harness, key: str, **request: object) -> int:
    return k.kernel.enqueue(task=TASK, key=key, request=request or None).occurrence_id


def _status(k: Harness, occ_id: int) -> str:
    return k.kernel.get_occurrence(occ_id).status.value


def test_a_revoke_by_task_id_cancels_a_run_not_started_once_and_owes_revoked(
    k: Harness,
) -> None:
    occ_id = _routed(k, "t-1")
    other = _routed(k, "t-2")
    [moved] = k.kernel.revoke(["t-1"], terminate=False, operator="worker@a")
    assert moved[:2] == (occ_id, "t-1") and moved[-2:] == ("cancelled", True)
    assert (_status(k, occ_id), _status(k, other)) == ("cancelled", "queued")
    # A second worker of the same broadcast: the run is named, nothing left to do.
    [again] = k.kernel.revoke(["t-1"], terminate=True, operator="worker@b")
    assert again[-2:] == ("cancelled", False)
    events = [e.type for e in k.kernel.events(occurrence_id=occ_id, limit=50)]
    assert events.count("occurrence_cancelled") == 1, events
    assert any("revoke:worker@a" in str(e.data) for e in k.kernel.events(occurrence_id=occ_id))
    owed = k.kernel.run_notifications(occ_id, moved.fence)
    assert [n.body["status"] for n in owed] == ["cancelled"], owed
    # An id no routed run has: Celery's own, the kernel changes nothing.
    assert k.kernel.revoke(["not-routed"], terminate=True, operator="worker@a") == []


def test_a_running_run_is_stopped_only_by_a_revoke_with_terminate(k: Harness) -> None:
    occ_id = _routed(k, "t-run")
    claim = k.kernel.claim(occ_id, owner="w1", lease=30)
    assert claim is not None
    # As Celery: without terminate a running task finishes.
    [left] = k.kernel.revoke(["t-run"], terminate=False, operator="w")
    assert left[-2:] == ("running", False)
    assert not k.kernel.get_occurrence(occ_id).cancel_requested
    [moved] = k.kernel.revoke(["t-run"], terminate=True, operator="w")
    assert (moved.status, moved.fence, moved.moved) == ("running", claim.fence, True)
    assert k.kernel.get_occurrence(occ_id).cancel_requested
    [again] = k.kernel.revoke(["t-run"], terminate=True, operator="w2")
    assert again[-2:] == ("running", False)


def test_a_revoke_of_an_ended_run_changes_nothing(k: Harness) -> None:
    occ_id = _routed(k, "t-done")
    claim = k.kernel.claim(occ_id, owner="w1", lease=30)
    assert claim is not None
    k.kernel.succeed(occ_id, owner="w1", fence=claim.fence, result="ok")
    [found] = k.kernel.revoke(["t-done"], terminate=True, operator="w")
    assert found[-2:] == ("succeeded", False)
    assert _status(k, occ_id) == "succeeded"


def test_a_revoke_by_stamped_headers_cancels_the_runs_whose_stamps_match(k: Harness) -> None:
    one = _routed(k, "s-1", stamped_headers=["mon"], stamps={"mon": "m-1"})
    listed = _routed(k, "s-2", stamped_headers=["mon"], stamps={"mon": ["m-0", "m-2"]})
    other = _routed(k, "s-3", stamped_headers=["mon"], stamps={"mon": "m-3"})
    unstamped = _routed(k, "s-4")
    running = _routed(k, "s-5", stamped_headers=["mon"], stamps={"mon": "m-1"})
    assert k.kernel.claim(running, owner="w1", lease=30) is not None
    found = k.kernel.revoke_stamped({"mon": ["m-1", "m-2"]}, terminate=False, operator="w")
    assert [(m.occurrence_id, m.moved) for m in found] == [
        (one, True),
        (listed, True),
        (running, False),
    ]
    statuses = [_status(k, o) for o in (one, listed, other, unstamped, running)]
    assert statuses == ["cancelled", "cancelled", "queued", "queued", "running"]
    [stopped] = k.kernel.revoke_stamped({"mon": "m-1"}, terminate=True, operator="w")
    assert stopped.moved and (stopped.occurrence_id, stopped.task_id, stopped.status) == (
        running,
        "s-5",
        "running",
    )
    # Ended runs are not read again; the one asked already is named, not moved.
    [again] = k.kernel.revoke_stamped({"mon": "m-1"}, terminate=True, operator="w")
    assert (again.occurrence_id, again.status, again.moved) == (running, "running", False)


def test_stamps_match_as_celerys_worker_matches_them() -> None:
    assert stamps_match({"a": "1"}, {"a": "1"})
    assert stamps_match({"a": ["1", "2"]}, {"a": "2"})
    assert stamps_match({"a": "1", "b": "x"}, {"a": "9", "b": ["x"]})
    assert not stamps_match({"a": "1"}, {"b": "1"})
    assert not stamps_match({"a": None}, {"a": [None]})
    assert not stamps_match({"a": 1}, {"a": "1"})
