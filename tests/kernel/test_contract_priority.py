"""Priority (issue 38 item 7): a job's ``priority`` is its occurrences' own, and the
pump's hints and a worker's claim_next take higher ones first; on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kernel import InvalidArgument

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness


def test_a_jobs_priority_is_its_fired_occurrences_and_claim_next_takes_it_first(
    k: Harness,
) -> None:
    backlog = k.occurrences("bulk", 20)
    [urgent] = k.occurrences("urgent", 1, priority=255)
    assert k.kernel.get_job("urgent").spec["priority"] == 255
    assert "priority" not in k.kernel.get_job("bulk").spec  # 0 adds nothing to a revision
    hints = k.kernel.dispatch_batch(limit=100, rehint_after=30)
    assert hints[0].occurrence_id == urgent and hints[0].priority == 255
    assert {h.priority for h in hints[1:]} == {0}
    first = k.kernel.claim_next(owner="w", lease=30)
    assert first is not None and first.occurrence.id == urgent
    second = k.kernel.claim_next(owner="w", lease=30)
    assert second is not None and second.occurrence.id == backlog[0]


def test_an_enqueue_takes_its_jobs_priority_unless_the_call_names_one(k: Harness) -> None:
    settings = {"priority": 5}
    default = k.kernel.enqueue(task="proj.t", settings=settings)
    named = k.kernel.enqueue(task="proj.t", settings=settings, priority=0)
    hints = {h.occurrence_id: h.priority for h in k.kernel.dispatch_batch(limit=9, rehint_after=30)}
    assert hints == {default.occurrence_id: 5, named.occurrence_id: 0}
    assert default.priority == 5


@pytest.mark.parametrize("value", [-1, 256, "high", True, 2.5])
def test_a_priority_outside_0_to_255_is_refused_naming_it(k: Harness, value: object) -> None:
    with pytest.raises(InvalidArgument) as refused:
        k.define("job", priority=value)
    assert refused.value.field == "priority"
    if isinstance(value, int) and not isinstance(value, bool):
        assert "255" in refused.value.message
