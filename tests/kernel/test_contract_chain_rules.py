"""Chain rules where a job is defined (issue 13): the parent exists, a child has no schedule,
and one batch applies parents before the jobs chained after them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from kernel.errors import InvalidArgument

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness


def _spec(job_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": job_id, "kind": "callable", "payload": {"callable": "jobs.sample:run"}, **fields}


def test_a_child_needs_its_parent_and_no_schedule_of_its_own(k: Harness) -> None:
    with pytest.raises(InvalidArgument) as missing:
        k.define("child", after={"job": "parent"})
    assert missing.value.field == "after.job"
    assert "'parent' does not exist" in missing.value.message
    k.define("parent")
    with pytest.raises(InvalidArgument) as scheduled:
        k.define("child", after={"job": "parent"}, schedule={"every": 60})
    assert scheduled.value.field == "schedule"
    assert k.define("child", after={"job": "parent"}).id == "child"
    assert [e.type for e in k.kernel.events(limit=10)].count("job_defined") == 2


def test_a_batch_applies_parents_first_and_answers_in_its_own_order(k: Harness) -> None:
    batch = [
        _spec("grandchild", after={"job": "child"}),
        _spec("child", after={"job": "root"}),
        _spec("root", schedule={"every": 60}),
        _spec("alone"),
    ]
    applied = k.kernel.apply_jobs(batch)
    assert [(job.id, change) for job, change in applied] == [
        ("grandchild", "created"),
        ("child", "created"),
        ("root", "created"),
        ("alone", "created"),
    ]
    assert k.kernel.apply_jobs(batch)[0][1] == "unchanged"


def test_a_batch_whose_parent_is_nowhere_applies_nothing(k: Harness) -> None:
    with pytest.raises(InvalidArgument) as refused:
        k.kernel.apply_jobs([_spec("root"), _spec("orphan", after={"job": "ghost"})])
    assert "'ghost' does not exist" in refused.value.message
    assert k.kernel.list_jobs() == []
