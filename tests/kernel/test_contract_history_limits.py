"""Per-job history limits (``history: {succeeded, failed}``), applied by the retention pass."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import sqlalchemy as sa

from kernel.errors import InvalidArgument, NotFound
from kernel.states import OccurrenceStatus as S
from kernel.store import Kernel
from kernel.testing import ManualClock

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


def test_the_newest_successes_are_kept_and_every_dead_letter(k: Harness) -> None:
    k.define("limited", history={"succeeded": 2})
    k.define("unlimited")
    ok = [_settle(k.kernel, k.clock, "limited", f"s{n}", succeed=True) for n in range(4)]
    dead = [_settle(k.kernel, k.clock, "limited", f"f{n}", succeed=False) for n in range(3)]
    cancelled = k.kernel.run_now("limited", request_id="c", operator="t", force=True)
    k.kernel.cancel(cancelled.occurrence.id, request_id="cc", operator="t")
    other = [_settle(k.kernel, k.clock, "unlimited", f"o{n}", succeed=n % 2 == 0) for n in range(4)]

    done = k.kernel.apply_retention(NO_AGES)
    assert (done["occurrences"], done["more"]) == (2, False)
    assert _statuses(k.kernel, "limited") == {
        ok[2]: "succeeded",
        ok[3]: "succeeded",
        **{d: "dead_letter" for d in dead},  # unresolved: never pruned (SPEC §6)
        cancelled.occurrence.id: "cancelled",
    }
    assert sorted(_statuses(k.kernel, "unlimited")) == other
    with pytest.raises(NotFound):
        k.kernel.get_occurrence(ok[0])
    assert k.kernel.events(occurrence_id=ok[0]) == []
    job_events = k.kernel.events(job_id="limited", limit=1000)
    pruned = [e for e in job_events if e.type == "history_pruned"]
    assert [(e.data["statuses"], e.data["occurrences"], e.data["kept"]) for e in pruned] == [
        (["succeeded"], 2, 2),
    ]
    assert {e.data["reason"] for e in pruned} == {"history"}
    kept_keys = {k.kernel.get_occurrence(o).trigger_key for o in ok[2:]}
    assert not kept_keys & {key for e in pruned for key in e.data["trigger_keys"]}
    assert k.kernel.apply_retention(NO_AGES)["occurrences"] == 0  # nothing left past a limit


def test_a_job_stored_with_history_failed_keeps_its_dead_letters(k: Harness) -> None:
    """A job defined while ``history.failed`` was accepted still holds it in its stored
    spec: retention prunes none of its dead letters, and each can be requeued."""
    k.define("limited", history={"succeeded": 1})
    engine = sa.create_engine(k.url)
    with engine.begin() as conn:  # the spec as an earlier release stored it
        conn.execute(
            sa.text("UPDATE jobs SET spec = replace(spec, :was, :now) WHERE id = 'limited'"),
            {"was": '"history":{"succeeded":1}', "now": '"history":{"failed":1,"succeeded":1}'},
        )
    engine.dispose()
    assert k.kernel.get_job("limited").spec["history"] == {"failed": 1, "succeeded": 1}
    dead = [_settle(k.kernel, k.clock, "limited", f"f{n}", succeed=False) for n in range(3)]

    assert k.kernel.apply_retention(NO_AGES)["occurrences"] == 0
    assert _statuses(k.kernel, "limited") == {d: "dead_letter" for d in dead}
    assert "occurrence_dead_letter" in k.event_types(dead[0])
    requeued = k.kernel.requeue(dead[0], request_id="rq", operator="ops")
    assert requeued.occurrence.status == S.RETRY_WAIT


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
    ({}, "history.succeeded"),
    ({"succeeded": 1, "failed": 0}, "history.failed"),
    ({"succeeded": 5, "failed": 5}, "history.failed"),  # dead letters wait for an operator
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
