"""A bounded schedule on a real Beat and worker (issue 39 items 1, 2): every firing its
``max_runs`` or ``end`` allows runs, the last included (it retires the job in the
transaction that makes it), and no more are made, whatever history is kept."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from integration.stack import Stack

pytestmark = pytest.mark.long


def _retired_with_every_run_done(stack: Stack, job_id: str) -> int:
    """Wait until the job is retired and each firing it made settled; each run (a firing
    overlap did not skip) succeeded, and ran once. How many runs it made."""
    stack.wait(
        lambda: (
            not stack.kernel.get_job(job_id).enabled
            and bool(stack.occurrences(job_id))
            and stack.settled(job_id)
        ),
        timeout=60,
        what=f"{job_id} retired with every firing settled",
    )
    made = [o for o in stack.occurrences(job_id) if o.status.value != "skipped"]
    assert {o.status.value for o in made} == {"succeeded"}, [o.to_dict() for o in made]
    assert len(stack.ledger(job_id=job_id)) == len(made)
    return len(made)


def test_every_run_a_bound_allows_runs_the_last_included(stack: Stack) -> None:
    stack.use_jobs(stack.job("counted", "record", schedule={"every": "1s", "max_runs": 3}))
    stack.start_worker("w1")
    stack.start_beat("beat")
    end = datetime.now(UTC) + timedelta(seconds=3)
    stack.define(stack.job("ended", "record", schedule={"every": "1s", "end": end.isoformat()}))
    assert _retired_with_every_run_done(stack, "counted") == 3
    assert _retired_with_every_run_done(stack, "ended") >= 1
