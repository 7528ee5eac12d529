"""A bounded schedule (``end``, ``max_runs``) through the kernel: the firing that retires
the job still runs, and ``max_runs`` counts the firings made, whatever history is kept
(issue 39 items 1 and 2)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernel.states import OccurrenceStatus as S

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness

#: Only the per-job limits: no status ages.
NO_AGES: dict[str, float | None] = {"succeeded": None, "cancelled": None, "skipped": None}


def _run(k: Harness, occurrence_id: int) -> None:
    """Claim and succeed one occurrence, as a worker would; fails if it is not claimable."""
    claim = k.kernel.claim(occurrence_id, owner="w1", lease=30)
    assert claim is not None, f"occurrence {occurrence_id} is not claimable"
    k.kernel.succeed(occurrence_id, owner="w1", fence=claim.fence)
    k.clock.advance(1)


def test_the_firing_that_reaches_max_runs_runs_after_the_job_retires(k: Harness) -> None:
    k.define(schedule={"cron": "* * * * *", "max_runs": 2})
    made = list(k.fire(n=2).created)
    assert not k.kernel.get_job("job").enabled  # retired by its second firing

    for occurrence_id in made:
        _run(k, occurrence_id)
    assert [k.kernel.get_occurrence(o).status for o in made] == [S.SUCCEEDED, S.SUCCEEDED]


def test_the_last_firing_before_end_runs_after_the_job_retires(k: Harness) -> None:
    job = k.define(schedule={"cron": "* * * * *", "end": "2030-01-01T00:00:00Z"})
    at = k.clock.now
    report = k.kernel.fire(
        "job",
        expected_revision=job.revision,
        expected_cursor=None,
        firings=[(k.cron_key(at), at)],
        next_cursor=None,  # past its end: no firing after this one
    )
    assert not k.kernel.get_job("job").enabled
    _run(k, report.created[0])


def test_an_operator_disable_still_holds_the_firings_of_a_job_once_retired(k: Harness) -> None:
    k.define(schedule={"cron": "* * * * *", "max_runs": 1})
    [last] = k.fire().created
    k.kernel.set_job_enabled("job", True)  # enabled again: its runs stay spent
    k.kernel.set_job_enabled("job", False, operator="ops")  # the operator holds it
    assert k.kernel.claim(last, owner="w1", lease=30) is None


def test_max_runs_counts_the_firings_made_not_the_runs_history_kept(k: Harness) -> None:
    k.define(schedule={"cron": "* * * * *", "max_runs": 3}, history={"succeeded": 1})
    made: list[int] = []
    for _ in range(6):
        if not k.kernel.get_job("job").enabled:
            break
        created = k.fire().created
        made.extend(created)
        for occurrence_id in created:
            _run(k, occurrence_id)
        k.kernel.apply_retention(NO_AGES)  # keeps only the newest success
    assert len(made) == 3
    assert not k.kernel.get_job("job").enabled
