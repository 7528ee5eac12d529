"""Per-job history limits (``history: {succeeded, failed}``), applied by the retention pass."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from kernel.errors import InvalidArgument, NotFound
from kernel.states import OccurrenceStatus as S
from kernel.store import Kernel
from kernel.testing import ManualClock
from tests.kernel.interleave import Actors, race_rounds, refusals_are_kernel_errors

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness

#: Only the per-job limits: no status ages.
NO_AGES: dict[str, float | None] = {"succeeded": None, "cancelled": None, "skipped": None}


def _settle(kernel: Kernel, clock: ManualClock, job: str, tag: str, *, succeed: bool) -> int:
    occ = kernel.run_now(job, request_id=tag, operator="t", force=True).occurrence.id
    claim = kernel.claim(occ, owner="w1", lease=30)
    assert claim is not None
    if succeed:
        kernel.succeed(occ, owner="w1", fence=claim.fence)
    else:
        kernel.fail(occ, owner="w1", fence=claim.fence, code="X", message="x", retryable=False)
    clock.advance(1)
    return occ


def _statuses(kernel: Kernel, job: str) -> dict[int, str]:
    return {o.id: o.status.value for o in kernel.list_occurrences(job_id=job, limit=1000)}


def test_the_newest_runs_of_each_limited_status_are_kept(k: Harness) -> None:
    k.define("limited", history={"succeeded": 2, "failed": 1})
    k.define("unlimited")
    ok = [_settle(k.kernel, k.clock, "limited", f"s{n}", succeed=True) for n in range(4)]
    dead = [_settle(k.kernel, k.clock, "limited", f"f{n}", succeed=False) for n in range(3)]
    cancelled = k.kernel.run_now("limited", request_id="c", operator="t", force=True)
    k.kernel.cancel(cancelled.occurrence.id, request_id="cc", operator="t")
    other = [_settle(k.kernel, k.clock, "unlimited", f"o{n}", succeed=n % 2 == 0) for n in range(4)]

    done = k.kernel.apply_retention(NO_AGES)
    assert (done["occurrences"], done["more"]) == (4, False)
    assert _statuses(k.kernel, "limited") == {
        ok[2]: "succeeded",
        ok[3]: "succeeded",
        dead[2]: "dead_letter",
        cancelled.occurrence.id: "cancelled",
    }
    assert sorted(_statuses(k.kernel, "unlimited")) == other
    for gone in (ok[0], dead[0]):
        with pytest.raises(NotFound):
            k.kernel.get_occurrence(gone)
        assert k.kernel.events(occurrence_id=gone) == []
    job_events = k.kernel.events(job_id="limited", limit=1000)
    pruned = [e for e in job_events if e.type == "history_pruned"]
    assert sorted((e.data["statuses"], e.data["occurrences"], e.data["kept"]) for e in pruned) == [
        (["dead_letter"], 2, 1),
        (["succeeded"], 2, 2),
    ]
    assert {e.data["reason"] for e in pruned} == {"history"}
    kept_keys = {k.kernel.get_occurrence(o).trigger_key for o in ok[2:]}
    assert not kept_keys & {key for e in pruned for key in e.data["trigger_keys"]}
    assert k.kernel.apply_retention(NO_AGES)["occurrences"] == 0  # nothing left past a limit


def test_a_pass_deletes_at_most_its_limit_and_says_more_is_left(k: Harness) -> None:
    k.define("limited", history={"succeeded": 1})
    for n in range(5):
        _settle(k.kernel, k.clock, "limited", f"s{n}", succeed=True)
    first = k.kernel.apply_retention(NO_AGES, limit=3)
    assert (first["occurrences"], first["more"]) == (3, True)
    assert k.kernel.apply_retention(NO_AGES, limit=3)["occurrences"] == 1
    assert len(_statuses(k.kernel, "limited")) == 1


#: Each refused ``history`` and the field the refusal names.
BAD_HISTORY: list[tuple[Any, str]] = [
    ({}, "history"),
    ({"failed": 0}, "history.failed"),
    ({"succeeded": "ten"}, "history.succeeded"),
    ({"kept": 3}, "history.kept"),
    ([10], "history"),
]


def test_bad_history_limits_are_refused_naming_the_field(k: Harness) -> None:
    for history, field in BAD_HISTORY:  # one database for all: the refusal writes nothing
        with pytest.raises(InvalidArgument) as refused:
            k.define("limited", history=history)
        assert refused.value.field == field, history
    assert k.kernel.list_jobs() == []
    assert k.kernel.events(limit=10) == []


@pytest.fixture
def pair(k: Harness) -> Iterator[tuple[Kernel, Actors]]:
    actors = Actors(k.url, [k.clock, k.clock])
    yield k.kernel, actors
    actors.close()


def test_a_requeue_racing_the_limit_either_wins_or_finds_nothing(
    k: Harness, pair: tuple[Kernel, Actors]
) -> None:
    kernel, actors = pair
    postgres = k.backend == "postgres"
    for i in range(race_rounds(postgres, 20)):
        job = f"race-{i}"
        k.define(job, history={"failed": 1})
        older = _settle(kernel, k.clock, job, f"{job}-a", succeed=False)
        _settle(kernel, k.clock, job, f"{job}-b", succeed=False)
        pruned, requeued = actors.run(
            lambda kk: kk.apply_retention(NO_AGES),
            lambda kk, o=older, j=job: kk.requeue(o, request_id=f"rq-{j}", operator="ops"),
            hold=older,
        )
        refusals_are_kernel_errors([pruned, requeued])
        assert pruned.ok, (i, pruned)
        if requeued.ok:  # requeued first: no longer a dead letter, so the limit spared it
            assert kernel.get_occurrence(older).status == S.RETRY_WAIT, i
            assert pruned.value["occurrences"] == 0, (i, pruned)
        else:  # deleted first: the requeue finds nothing
            assert requeued.code == "NOT_FOUND", (i, requeued)
            assert pruned.value["occurrences"] == 1, (i, pruned)
