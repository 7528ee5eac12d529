"""Job definitions, Beat's fire cursor and create-if-absent firings (SPEC §2.1-2.2, I1, I5)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from kernel.errors import InvalidArgument, NotFound, RevisionConflict, StateConflict

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness

SPEC = {"id": "report", "kind": "callable", "payload": {"callable": "jobs.sample:run"}}


def test_define_is_a_no_op_on_identical_content_and_refuses_other_content(k: Harness) -> None:
    job, created = k.kernel.define_job(SPEC)
    assert created and job.revision == 1 and not job.planned
    # The same meaning spelled differently (a default written out) is the same job.
    again, created_again = k.kernel.define_job({**SPEC, "max_attempts": 3})
    assert not created_again and again.revision == 1 and again.digest == job.digest

    with pytest.raises(StateConflict) as refused:
        k.kernel.define_job({**SPEC, "max_attempts": 5})
    assert "'report'" in refused.value.message
    assert k.kernel.get_job("report").spec["max_attempts"] == 3
    assert [e.type for e in k.kernel.events(job_id="report")] == ["job_defined"]


def test_revise_is_a_compare_and_set_on_the_revision(k: Harness) -> None:
    k.kernel.define_job(SPEC)
    k.fire("report")
    unchanged, changed = k.kernel.revise_job(SPEC, expected_revision=1)
    assert not changed and unchanged.revision == 1 and unchanged.planned

    revised, changed = k.kernel.revise_job({**SPEC, "queue": "reports"}, expected_revision=1)
    assert changed and revised.revision == 2 and revised.queue == "reports"
    # A new definition is planned afresh by the next Beat.
    assert not revised.planned and revised.next_trigger_key is None

    with pytest.raises(RevisionConflict) as stale:
        k.kernel.revise_job({**SPEC, "queue": "other"}, expected_revision=1)
    assert stale.value.details["actual_revision"] == 2
    assert k.kernel.get_job("report").queue == "reports"
    with pytest.raises(NotFound):
        k.kernel.revise_job({**SPEC, "id": "missing"}, expected_revision=1)
    revised_events = [e for e in k.kernel.events(job_id="report") if e.type == "job_revised"]
    assert [e.data["revision"] for e in revised_events] == [2]


def test_apply_creates_updates_or_leaves_unchanged(k: Harness) -> None:
    job, outcome = k.kernel.apply_job(SPEC)
    assert (outcome, job.revision) == ("created", 1)
    job, outcome = k.kernel.apply_job(SPEC)
    assert (outcome, job.revision) == ("unchanged", 1)
    job, outcome = k.kernel.apply_job({**SPEC, "max_attempts": 7})
    assert (outcome, job.revision, job.spec["max_attempts"]) == ("updated", 2, 7)
    with pytest.raises(InvalidArgument) as invalid:
        k.kernel.apply_job({**SPEC, "max_attempts": 0})
    assert invalid.value.field == "max_attempts"
    assert k.kernel.get_job("report").revision == 2


def test_disable_stops_firing_and_enable_replans(k: Harness) -> None:
    k.kernel.define_job(SPEC)
    k.fire("report")
    planned = k.kernel.get_job("report")
    disabled, changed = k.kernel.set_job_enabled("report", False)
    assert changed and not disabled.enabled
    assert k.kernel.set_job_enabled("report", False)[1] is False
    stale = k.kernel.fire(
        "report",
        expected_revision=1,
        expected_cursor=planned.next_trigger_key,
        firings=[("cron:x", k.clock.now)],
        next_cursor=None,
    )
    assert stale.stale and "report" not in {j.id for j in k.kernel.due_jobs()}

    enabled, changed = k.kernel.set_job_enabled("report", True)
    assert changed and enabled.enabled and not enabled.planned
    assert "report" in {j.id for j in k.kernel.due_jobs()}
    types = [e.type for e in k.kernel.events(job_id="report")]
    assert types[-2:] == ["job_disabled", "job_enabled"]


def test_delete_is_refused_while_an_occurrence_is_unsettled(k: Harness) -> None:
    [occ_id] = k.occurrences("report")
    with pytest.raises(StateConflict) as refused:
        k.kernel.delete_job("report")
    assert "'report'" in refused.value.message and refused.value.details["active"] == 1

    k.kernel.cancel(occ_id, request_id="cancel-1", operator="ops")
    k.kernel.delete_job("report")
    with pytest.raises(NotFound):
        k.kernel.get_job("report")
    assert k.kernel.events(job_id="report")[-1].type == "job_deleted"
    with pytest.raises(NotFound):
        k.kernel.delete_job("report")


def test_delete_is_refused_while_a_job_is_chained_after_it(k: Harness) -> None:
    k.define("parent")
    k.define("child", after={"job": "parent"})
    with pytest.raises(StateConflict) as refused:
        k.kernel.delete_job("parent")
    assert "child" in refused.value.message
    k.kernel.delete_job("child")
    k.kernel.delete_job("parent")
    assert k.kernel.list_jobs() == []


def test_fire_advances_the_cursor_and_creates_each_firing_once(k: Harness) -> None:
    k.define("report")
    first = k.fire("report", 2)
    assert len(first.created) == 2
    job = k.kernel.get_job("report")
    assert job.planned and job.next_fire_at == k.clock.now + timedelta(minutes=2)
    occ = k.kernel.get_occurrence(first.created[1])
    assert occ.trigger_key == k.cron_key(k.clock.now + timedelta(minutes=1))
    assert occ.status == "queued" and occ.job_revision == 1

    # A caller that passes an already materialised firing again creates nothing.
    again = k.kernel.fire(
        "report",
        expected_revision=1,
        expected_cursor=job.next_trigger_key,
        firings=[(occ.trigger_key, occ.scheduled_for)],
        next_cursor=None,
    )
    assert not again.stale and again.created == () and again.skipped == ()
    assert len(k.kernel.list_occurrences(job_id="report")) == 2


def test_a_stale_cursor_or_revision_changes_nothing(k: Harness) -> None:
    k.define("report")
    k.fire("report")
    job = k.kernel.get_job("report")
    now = k.clock.now
    for revision, cursor in ((1, "cron:not-the-cursor"), (2, job.next_trigger_key), (1, None)):
        report = k.kernel.fire(
            "report",
            expected_revision=revision,
            expected_cursor=cursor,
            firings=[("cron:late", now)],
            next_cursor=("cron:later", now + timedelta(hours=1)),
        )
        assert report.stale and report.created == ()
    assert k.kernel.get_job("report") == job
    assert len(k.kernel.list_occurrences(job_id="report")) == 1
    with pytest.raises(NotFound):
        k.kernel.get_job("nope")
    assert k.kernel.fire("nope", expected_revision=1, expected_cursor=None, next_cursor=None).stale


def test_a_firing_made_under_one_revision_is_not_made_again_under_the_next(k: Harness) -> None:
    k.define("report")
    [first] = k.fire("report").created
    fired = k.kernel.get_occurrence(first)
    k.kernel.revise_job({**k.kernel.get_job("report").spec, "max_attempts": 9}, expected_revision=1)
    later = fired.scheduled_for + timedelta(minutes=1)
    report = k.kernel.fire(
        "report",
        expected_revision=2,
        expected_cursor=None,
        firings=[(fired.trigger_key, fired.scheduled_for), (k.cron_key(later), later)],
        next_cursor=None,
    )
    assert not report.stale and len(report.created) == 1
    occurrences = k.kernel.list_occurrences(job_id="report")
    assert sorted((o.trigger_key, o.job_revision) for o in occurrences) == [
        (fired.trigger_key, 1),
        (k.cron_key(later), 2),
    ]
    # Each occurrence runs the definition it was created under (I5).
    assert k.kernel.get_occurrence(first).max_attempts == 3
    assert k.kernel.get_occurrence(report.created[0]).definition["max_attempts"] == 9


def test_missed_firings_are_recorded_as_skipped(k: Harness) -> None:
    k.define("report")
    now = k.clock.now
    report = k.kernel.fire(
        "report",
        expected_revision=1,
        expected_cursor=None,
        missed=[("cron:a", now - timedelta(hours=2)), ("cron:b", now - timedelta(hours=1))],
        missed_reason="catchup",
        firings=[("cron:c", now)],
        next_cursor=None,
    )
    assert report.skipped == (("cron:a", "catchup"), ("cron:b", "catchup"))
    assert len(report.created) == 1
    skipped = k.kernel.list_occurrences(job_id="report", statuses=["skipped"])
    assert {o.skip_reason for o in skipped} == {"catchup"} and all(o.settled_at for o in skipped)
    # A planned job with no cursor has no firings left: it is not due any more.
    assert "report" not in {j.id for j in k.kernel.due_jobs()}


def test_due_jobs_lists_unplanned_and_due_cursors(k: Harness) -> None:
    k.define("report")
    k.define("other")
    assert {j.id for j in k.kernel.due_jobs()} == {"report", "other"}
    k.fire("report")
    k.fire("other")
    assert k.kernel.due_jobs() == []
    k.clock.advance(60)
    assert {j.id for j in k.kernel.due_jobs()} == {"report", "other"}
    assert len(k.kernel.due_jobs(limit=1)) == 1


def test_run_now_makes_a_manual_firing_once_and_leaves_the_cursor(k: Harness) -> None:
    k.define("report", enabled=False)
    before = k.kernel.get_job("report")
    first = k.kernel.run_now("report", request_id="r-1", operator="ops")
    assert not first.deduplicated
    assert first.occurrence.trigger_key == "manual:r-1" and first.occurrence.status == "queued"
    replay = k.kernel.run_now("report", request_id="r-1", operator="ops")
    assert replay.deduplicated and replay.occurrence.id == first.occurrence.id
    assert len(k.kernel.list_occurrences(job_id="report")) == 1
    after = k.kernel.get_job("report")
    assert (after.planned, after.next_trigger_key, after.revision) == (
        before.planned,
        before.next_trigger_key,
        before.revision,
    )
    assert k.kernel.claim(first.occurrence.id, owner="w1", lease=30) is not None
    run_events = [e for e in k.kernel.events(job_id="report") if e.type == "job_run_now"]
    assert [(e.occurrence_id, e.data["request_id"]) for e in run_events] == [
        (first.occurrence.id, "r-1")
    ]
    with pytest.raises(NotFound):
        k.kernel.run_now("missing", request_id="r-2", operator="ops")
