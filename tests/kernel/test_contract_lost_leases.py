"""A lost lease (killed worker, lost host) is reclaimed without spending an attempt, up to
the job's ``max_lost_leases``; one more dead-letters the run as a poison pill (issue 38)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kernel.errors import InvalidArgument
from kernel.states import OccurrenceStatus as S

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness


def test_a_reclaim_after_an_expired_lease_spends_no_attempt(k: Harness) -> None:
    # One attempt, as a moved Celery entry without kernel options gets.
    occ_id = k.running(max_attempts=1).occurrence.id
    for lost, owner in enumerate(("w2", "w3", "w4"), start=1):
        k.clock.advance(30)
        assert k.kernel.expire_leases()["dead_letter"] == 0
        again = k.kernel.claim(occ_id, owner=owner, lease=30)
        assert again is not None, f"reclaim {lost} refused"
        assert (again.fence, again.occurrence.attempt) == (lost + 1, 1)
        claimed = k.kernel.events(occurrence_id=occ_id)[-1]
        assert claimed.type == "occurrence_claimed"
        assert (claimed.data["attempt"], claimed.data["lost_leases"]) == (1, lost)
    k.kernel.succeed(occ_id, owner="w4", fence=4)
    assert k.kernel.get_occurrence(occ_id).status == S.SUCCEEDED


def test_one_lost_lease_past_the_bound_dead_letters_a_poison_pill(k: Harness) -> None:
    by_next = k.running("by-next", max_lost_leases=1).occurrence.id
    by_claim = k.running("by-claim", max_lost_leases=1).occurrence.id
    # Beat's expiry settles it.
    never = k.running("never", max_lost_leases=0).occurrence.id
    k.clock.advance(30)
    assert k.kernel.expire_leases()["dead_letter"] == 1  # max_lost_leases 0: no reclaim
    for occ_id in (by_next, by_claim):
        assert k.kernel.claim(occ_id, owner="w2", lease=30) is not None
    k.clock.advance(30)
    # Before Beat: the claim that meets the expired lease settles it as Beat's expiry would.
    assert k.kernel.claim(by_claim, owner="w3", lease=30) is None
    assert k.kernel.claim_next(owner="w3", lease=30) is None
    assert k.kernel.get_occurrence(by_next).status == S.DEAD_LETTER
    assert k.kernel.expire_leases()["dead_letter"] == 0
    for occ_id, lost, fence in ((never, 0, 1), (by_next, 1, 2), (by_claim, 1, 2)):
        occ = k.kernel.get_occurrence(occ_id)
        assert occ.status == S.DEAD_LETTER
        error = occ.last_error or {}
        assert error.get("code") == "POISON_PILL"
        assert "poison pill" in error["message"] and f"max_lost_leases {lost}" in error["message"]
        last = k.kernel.events(occurrence_id=occ_id)[-1]
        assert (last.type, last.fence, last.data["reason"]) == (
            "occurrence_dead_letter",
            fence,
            "lease_expired",
        )
        # Not the task's failure: the attempt it ran under is the first.
        assert occ.attempt == 1


def test_max_lost_leases_is_a_job_setting(k: Harness) -> None:
    plain = k.define("plain")
    assert "max_lost_leases" not in plain.spec  # the default keeps existing revisions
    bounded = k.define("bounded", max_lost_leases=7)
    assert bounded.spec["max_lost_leases"] == 7
    with pytest.raises(InvalidArgument) as refused:
        k.define("negative", max_lost_leases=-1)
    assert refused.value.field == "max_lost_leases"
