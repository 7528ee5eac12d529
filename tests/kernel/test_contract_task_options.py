"""A task's ``kernel_options`` (its implicit job's settings) for its calls (issue 40): each
field honoured by the runs its calls make, or refused naming it; on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from kernel import EnqueueRequest, InvalidArgument, StateConflict
from kernel.store import Kernel

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness

TASK = "proj.send_invoice"

#: Fields a call cannot mean anything by: a schedule's, the job's identity, an operator's
#: switch, gates its calls do not pass.
REFUSED: list[tuple[str, Any]] = [
    ("id", "other"),
    ("kind", "shell"),
    ("payload", {"task": "proj.other"}),
    ("schedule", {"every": "30s"}),
    ("enabled", False),
    ("catchup", {"policy": "all"}),
    ("dst", {"gap": "skip"}),
    ("after", {"job": "other"}),
    ("delete_after_run", True),
    ("ttl", "1h"),
    ("budget", {"max_runs": 5}),
    ("approval", {"required": True}),
]


@pytest.mark.parametrize(("name", "value"), REFUSED, ids=[name for name, _ in REFUSED])
def test_a_field_calls_cannot_honour_is_refused_naming_it(
    k: Harness, name: str, value: Any
) -> None:
    with pytest.raises(InvalidArgument) as refused:
        k.kernel.enqueue(task=TASK, settings={name: value})
    assert refused.value.field == f"settings.{name}"
    assert "task's calls" in refused.value.message
    assert k.kernel.list_occurrences(limit=10) == [] and k.kernel.list_jobs() == []


def test_the_fields_calls_honour_reach_each_run(k: Harness) -> None:
    """What every run of a call is made with: its job's settings, snapshotted."""
    settings = {
        "queue": "mail", "max_attempts": 5, "retry": {"backoff": "10s"}, "max_lost_leases": 1,
        "lease": "30s", "timeout": 20, "priority": 7, "rate_limit": "10/m",
        "overlap": "queue", "delivery": "at-most-once", "pool": "smtp", "kill_grace": 3,
        "output": {"limit": 1024, "excerpt": 512}, "history": {"succeeded": 10},
        "notify": {"on": ["dead_letter"], "task": "proj.alert"},
    }  # fmt: skip
    made = k.kernel.enqueue(task=TASK, settings=settings)
    occ = k.kernel.get_occurrence(made.occurrence_id)
    definition = occ.definition
    assert (definition["queue"], definition["delivery"], definition["pool"]) == (
        "mail",
        "at-most-once",
        "smtp",
    )
    assert occ.max_attempts == 5
    assert definition["lease"] == 30.0 and definition["timeout"] == 20.0
    assert definition["kill_grace"] == 3.0 and definition["retry"]["backoff"] == 10.0
    assert definition["output"] == {"limit": 1024, "excerpt": 512}
    assert definition["max_lost_leases"] == 1 and definition["rate_limit"] == "10/m"
    assert definition["notify"]["task"] == "proj.alert" and made.priority == 7
    assert k.kernel.get_job("task:proj.send_invoice").spec["history"] == {"succeeded": 10}


def test_a_tasks_expires_is_each_calls_start_deadline(k: Harness) -> None:
    """``expires`` of the task's settings: a call not started this long after it could
    start is skipped ``expired``, as a firing of its job; the call's own comes first."""
    made = k.kernel.enqueue(task=TASK, settings={"expires": 30})
    later = k.kernel.enqueue(task=TASK, settings={"expires": 30}, countdown=60)
    own = k.kernel.enqueue(task=TASK, settings={"expires": 30}, expires=300)
    start = k.clock.now
    assert k.kernel.get_occurrence(made.occurrence_id).expires_at == start + timedelta(seconds=30)
    assert k.kernel.get_occurrence(later.occurrence_id).expires_at == start + timedelta(seconds=90)
    assert k.kernel.get_occurrence(own.occurrence_id).expires_at == start + timedelta(seconds=300)
    k.clock.advance(31)
    assert k.kernel.claim(made.occurrence_id, owner="w", lease=30) is None


BOUNDED = {"max_queued": 2}


def test_max_queued_bounds_a_tasks_waiting_calls(k: Harness) -> None:
    first = k.kernel.enqueue(task=TASK, settings=BOUNDED, key="a")
    k.kernel.enqueue(task=TASK, settings=BOUNDED, key="b")
    with pytest.raises(StateConflict) as refused:
        k.kernel.enqueue(task=TASK, settings=BOUNDED, key="c")
    assert refused.value.details["field"] == "settings.max_queued"
    assert refused.value.details["reason"] == "queue_full"
    assert "max_queued 2" in refused.value.message and TASK in refused.value.message
    assert len(k.kernel.list_occurrences(limit=10)) == 2  # nothing of the refused call
    again = k.kernel.enqueue(task=TASK, settings=BOUNDED, key="a")  # a replay is no new call
    assert again.deduplicated and again.occurrence_id == first.occurrence_id
    with pytest.raises(StateConflict):  # a batch: all of it or none
        k.kernel.enqueue_many([EnqueueRequest(TASK, settings=BOUNDED)] * 2)
    assert k.kernel.claim(first.occurrence_id, owner="w", lease=30) is not None
    k.kernel.enqueue(task=TASK, settings=BOUNDED)  # a running call waits no more
    assert len(k.kernel.list_occurrences(limit=10)) == 3


def test_max_queued_under_overlap_queue_counts_those_behind_the_next(k: Harness) -> None:
    """As for a firing: the one that runs (or runs next) and ``max_queued`` behind it."""
    settings = {"overlap": "queue", "max_queued": 1}
    k.kernel.enqueue(task=TASK, settings=settings)
    k.kernel.enqueue(task=TASK, settings=settings)
    with pytest.raises(StateConflict):
        k.kernel.enqueue(task=TASK, settings=settings)


def test_without_max_queued_a_tasks_calls_are_unbounded(k: Harness) -> None:
    """A job's default backlog bound (25) is a schedule's: calls are bounded only when
    the task's settings give one."""
    k.kernel.enqueue_many([EnqueueRequest(TASK, [i]) for i in range(30)])
    assert len(k.kernel.list_occurrences(limit=50)) == 30


def test_callers_released_together_at_the_bound_admit_exactly_the_bound(k: Harness) -> None:
    if k.backend == "sqlite":
        pytest.skip("SQLite's single writer serialises callers already; the race is PostgreSQL's")
    bound = {"max_queued": 3}
    callers = [Kernel.open(k.url, clock=k.clock) for _ in range(8)]
    try:
        callers[0].enqueue(task="proj.warm", settings=bound)  # the job and engines warm
        for caller in callers:
            caller.enqueue(task="proj.warm", settings={})
        barrier = threading.Barrier(len(callers))

        def call(caller: Kernel) -> bool:
            barrier.wait()
            try:
                caller.enqueue(task=TASK, settings=bound)
            except StateConflict:
                return False
            return True

        for _ in range(3):
            waiting = k.kernel.list_occurrences(job_id=f"task:{TASK}", statuses=["queued"])
            for occ in waiting:  # room for the bound again
                k.kernel.cancel(occ.id, request_id=f"c{occ.id}", operator="t")
            with ThreadPoolExecutor(len(callers)) as pool:
                admitted = list(pool.map(call, callers))
            assert sum(admitted) == 3
    finally:
        for caller in callers:
            caller.close()


def test_a_step_a_settle_makes_is_not_refused_by_max_queued(k: Harness) -> None:
    """A chain's next step (a link) belongs to a canvas its caller was admitted with: the
    settle makes it past its task's bound rather than strand the canvas."""
    k.kernel.enqueue(task="proj.next", settings=BOUNDED, countdown=60)
    k.kernel.enqueue(task="proj.next", settings=BOUNDED, countdown=60)
    step = {"task": "proj.next", "settings": BOUNDED, "options": {"task_id": "n1"}}
    first = k.kernel.enqueue(task=TASK, callbacks=[step]).occurrence_id
    claim = k.kernel.claim(first, owner="w", lease=30)
    assert claim is not None
    k.kernel.succeed(first, owner="w", fence=claim.fence, result=1)
    made = k.kernel.list_occurrences(job_id="task:proj.next", statuses=["queued"])
    assert len(made) == 3
