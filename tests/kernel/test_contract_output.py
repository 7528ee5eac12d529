"""A run's output is a fenced worker write: stored as run_output events while the lease holds."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kernel.errors import LeaseLost

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness


def test_output_is_stored_under_the_fence_that_holds_the_lease(k: Harness) -> None:
    claim = k.running(lease=30)
    occ_id = claim.occurrence.id

    k.kernel.append_output(
        occ_id, owner="w1", fence=claim.fence, chunks=[("stdout", "a\n"), ("stderr", "b\n")]
    )

    [event] = [e for e in k.kernel.events(occurrence_id=occ_id) if e.type == "run_output"]
    assert (event.fence, event.job_id) == (claim.fence, "job")
    assert event.data == {
        "output": [{"stream": "stdout", "text": "a\n"}, {"stream": "stderr", "text": "b\n"}]
    }


def test_output_of_a_stale_or_foreign_run_is_refused(k: Harness) -> None:
    claim = k.running(lease=30)
    occ_id = claim.occurrence.id
    with pytest.raises(LeaseLost):
        k.kernel.append_output(occ_id, owner="w2", fence=claim.fence, chunks=[("stdout", "x")])
    with pytest.raises(LeaseLost):
        k.kernel.append_output(occ_id, owner="w1", fence=claim.fence + 1, chunks=[("log", "x")])
    k.clock.advance(31)  # expired, not yet reclaimed: still refused
    with pytest.raises(LeaseLost):
        k.kernel.append_output(occ_id, owner="w1", fence=claim.fence, chunks=[("stdout", "x")])
    assert not [e for e in k.kernel.events(occurrence_id=occ_id) if e.type == "run_output"]
