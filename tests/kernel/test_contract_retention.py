"""Retention: per-status ages in bounded batches; delete_after_run and ttl jobs; one-shot
jobs disabled once they fired. Unresolved work is never pruned."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest
import sqlalchemy as sa

from kernel.db.limit_tables import budget_windows
from kernel.errors import InvalidArgument, NotFound
from kernel.statements.history import OLDEST_PRUNABLE
from kernel.states import OccurrenceStatus as S

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness

DAY = 86400.0


def settle(k: Harness, job: str, *, succeed: bool) -> int:
    claim = k.running(job)
    occ = claim.occurrence.id
    if succeed:
        k.kernel.succeed(occ, owner="w1", fence=claim.fence)
    else:
        k.kernel.fail(occ, owner="w1", fence=claim.fence, code="BOOM", message="x", retryable=False)
    return occ


def test_each_status_is_kept_for_its_own_age_and_dead_letters_stay(k: Harness) -> None:
    ok = settle(k, "job", succeed=True)
    dead = settle(k, "job", succeed=False)
    [waiting] = k.fire("job").created
    k.kernel.cancel(waiting, request_id="c", operator="op")
    k.clock.advance(2 * DAY)
    ages = {"succeeded": 3 * DAY, "cancelled": DAY, "skipped": None}
    first = k.kernel.apply_retention(ages)
    assert (first["occurrences"], first["jobs"], first["more"]) == (1, [], False)
    with pytest.raises(NotFound):
        k.kernel.get_occurrence(waiting)
    k.clock.advance(2 * DAY)
    assert k.kernel.apply_retention(ages)["occurrences"] == 1
    with pytest.raises(NotFound):
        k.kernel.get_occurrence(ok)
    k.clock.advance(400 * DAY)
    assert k.kernel.apply_retention(ages)["occurrences"] == 0
    assert k.kernel.get_occurrence(dead).status == S.DEAD_LETTER
    pruned = [e for e in k.kernel.events(limit=1000) if e.type == "history_pruned"]
    assert [e.data["statuses"] for e in pruned] == [["cancelled"], ["succeeded"]]


def test_a_pass_is_bounded_and_says_when_more_is_left(k: Harness) -> None:
    k.define("job")
    for _ in range(5):
        claim = k.running("job")
        k.kernel.succeed(claim.occurrence.id, owner="w1", fence=claim.fence)
    k.clock.advance(2 * DAY)
    passes = []
    while True:
        done = k.kernel.apply_retention({"succeeded": DAY}, limit=2)
        passes.append(done["occurrences"])
        if not done["more"]:
            break
    assert passes == [2, 2, 1]
    with pytest.raises(InvalidArgument):
        k.kernel.apply_retention({"dead_letter": DAY})


def test_a_one_shot_job_is_disabled_once_it_fired_and_delete_after_run_removes_it(
    k: Harness,
) -> None:
    at = (k.clock.now + timedelta(minutes=1)).isoformat()
    k.define("once", schedule={"at": at}, delete_after_run=True)
    job = k.kernel.get_job("once")
    assert job.spec["delete_after_run"] is True
    report = k.kernel.fire(
        "once",
        expected_revision=job.revision,
        expected_cursor=None,
        firings=[("at:x", k.clock.now)],
        next_cursor=None,
    )
    [occ] = report.created
    job = k.kernel.get_job("once")
    assert not job.enabled
    assert [
        e.data.get("reason") for e in k.kernel.events(job_id="once") if e.type == "job_disabled"
    ] == ["one_shot_fired"]
    # Not while its run is unsettled.
    assert k.kernel.apply_retention({})["jobs"] == []
    claim = k.kernel.claim(occ, owner="w1", lease=30)
    assert claim is not None
    k.kernel.succeed(occ, owner="w1", fence=claim.fence)
    assert k.kernel.apply_retention({})["jobs"] == ["once"]
    with pytest.raises(NotFound):
        k.kernel.get_job("once")
    # Its history stays (subject to the history ages).
    assert k.kernel.get_occurrence(occ).status == S.SUCCEEDED
    [expired] = [e for e in k.kernel.events(job_id="once") if e.type == "job_expired"]
    assert expired.data["reason"] == "delete_after_run"


def test_a_disabled_job_with_a_ttl_goes_that_long_after_it_finished(k: Harness) -> None:
    k.define("temp", ttl="7d")
    k.define("kept")
    dead = settle(k, "kept", succeed=False)
    settle(k, "temp", succeed=True)
    k.kernel.set_job_enabled("temp", False)
    k.kernel.set_job_enabled("kept", False)
    k.clock.advance(6 * DAY)
    assert k.kernel.apply_retention({})["jobs"] == []
    k.clock.advance(2 * DAY)
    assert k.kernel.apply_retention({})["jobs"] == ["temp"]
    assert k.kernel.get_occurrence(dead).status == S.DEAD_LETTER


def test_a_ttl_job_with_an_unresolved_dead_letter_or_a_child_is_kept(k: Harness) -> None:
    k.define("failing", ttl="1d")
    settle(k, "failing", succeed=False)
    k.define("parent", ttl="1d")
    k.define("child", after={"job": "parent"})
    for job in ("failing", "parent"):
        k.kernel.set_job_enabled(job, False)
    k.clock.advance(30 * DAY)
    assert k.kernel.apply_retention({})["jobs"] == []
    assert {j.id for j in k.kernel.list_jobs()} == {"failing", "parent", "child"}


def test_delete_after_run_needs_a_one_shot_schedule(k: Harness) -> None:
    with pytest.raises(InvalidArgument) as refused:
        k.define("cron", schedule={"every": "1m"}, delete_after_run=True)
    assert refused.value.details["field"] == "delete_after_run"
    # Jobs written before these fields keep their digest: absent means absent.
    assert (
        "ttl" not in k.define("plain").spec
        and "delete_after_run" not in k.kernel.get_job("plain").spec
    )


def _windows(k: Harness) -> list[int]:
    with k.kernel.engine.connect() as conn:
        rows = conn.execute(sa.select(budget_windows.c.window_start).order_by("window_start"))
        return [row.window_start for row in rows]


def test_budget_windows_that_ended_long_ago_are_pruned_in_bounded_passes(k: Harness) -> None:
    k.define("job", budget={"window": "1d", "max_runs": 5})
    for day in range(3):
        k.kernel.run_now("job", request_id=f"r{day}", operator="op")
        k.clock.advance(DAY)
    first, second, third = _windows(k)
    # The longest window is 31 days: a window is kept until 62 days after it began.
    k.clock.set(datetime.fromtimestamp(second / 1000 + 62.5 * DAY, UTC))
    done = k.kernel.apply_retention({"succeeded": None}, limit=1)
    assert (done["budget_windows"], done["more"]) == (1, True)
    done = k.kernel.apply_retention({"succeeded": None}, limit=1)
    assert (done["budget_windows"], done["more"]) == (1, True)
    assert k.kernel.apply_retention({"succeeded": None}, limit=1)["budget_windows"] == 0
    assert _windows(k) == [third] and first < second < third
    (budget,) = k.kernel.list_budgets()
    assert budget["runs"] == 1  # the window left is the latest one, still shown


def test_retentions_read_never_hands_over_a_dead_letter_even_when_asked(k: Harness) -> None:
    """The statement itself refuses unresolved runs (SPEC §6), beneath the facade's check:
    its index (occurrences_settled_by_status) holds dead letters too since revision 0029."""
    dead = settle(k, "job", succeed=False)
    k.clock.advance(2 * DAY)
    asked = {"status": "dead_letter", "settled_before": 2**62, "limit": 10}
    with k.kernel.engine.connect() as conn:
        assert OLDEST_PRUNABLE.all(conn, asked) == []
    assert k.kernel.get_occurrence(dead).status == S.DEAD_LETTER
