"""Fan-in (issue 29): ``after: {all: [A, B], within: ...}`` fires once all parents
succeeded for the same logical firing (their scheduled instant), else records the firing
skipped with its reason; an unknown parent or the job itself is refused."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from kernel import InvalidArgument, Kernel, StateConflict
from kernel.testing import ManualClock

from .conftest import Beat

#: The fan-in's trigger key for the parents' 12:01 firing.
FIRST = "fan_in:2026-03-02T12:01:00Z"


def _define_family(beat: Beat, within: str = "10m", **parent_fields: object) -> None:
    beat.define("a", overlap="allow", **parent_fields)
    beat.define("b", overlap="allow", schedule={"every": 60, "jitter": "20s"})
    beat.define("c", overlap="allow", schedule=None, after={"all": ["a", "b"], "within": within})


def _settle(beat: Beat, job_id: str, minute: int, succeed: bool = True) -> None:
    occ = next(o for o in beat.occurrences(job_id) if o.trigger_key == beat.key(minute))
    claim = beat.kernel.claim(occ.id, owner="w")
    assert claim is not None
    if succeed:
        beat.kernel.succeed(occ.id, owner="w", fence=claim.fence)
    else:
        beat.kernel.fail(
            occ.id, owner="w", fence=claim.fence, code="E", message="no", retryable=False
        )


def test_the_child_fires_once_when_every_parent_succeeded_for_the_same_firing(
    beat: Beat,
) -> None:
    _define_family(beat)
    beat.tick(beat.minute(1.5))  # a and b fire 12:01 (b's due time is jittered)
    _settle(beat, "a", 1)
    beat.tick(beat.minute(1.6))
    assert beat.occurrences("c") == []  # b has not succeeded yet

    _settle(beat, "b", 1)
    beat.tick(beat.minute(1.7))
    beat.tick(beat.minute(1.8))
    (child,) = beat.occurrences("c")
    assert child.trigger_key == FIRST and child.status == "queued"
    assert child.scheduled_for == beat.minute(1)
    created = beat.kernel.events(occurrence_id=child.id, limit=5)[0]
    assert len(created.data["parents"]) == 2


def test_a_parent_missing_past_within_skips_the_firing_as_timed_out(beat: Beat) -> None:
    _define_family(beat, within="2m")
    beat.tick(beat.minute(1.5))
    _settle(beat, "a", 1)
    beat.tick(beat.minute(3.1))  # within ends at 12:03, the settle grace 15 s later
    assert FIRST not in beat.keys("c")
    beat.tick(beat.minute(3.5))
    assert beat.skips("c")[FIRST] == "fan_in_timeout"
    (timed_out,) = [o for o in beat.occurrences("c") if o.trigger_key == FIRST]
    (skipped,) = beat.kernel.events(occurrence_id=timed_out.id, limit=5)
    assert skipped.data["missing"] == ["b"]


def test_a_failed_parent_skips_the_firing_naming_the_parent(beat: Beat) -> None:
    _define_family(beat)
    beat.tick(beat.minute(1.5))
    _settle(beat, "a", 1)
    _settle(beat, "b", 1, succeed=False)
    beat.tick(beat.minute(1.9))
    assert beat.skips("c") == {FIRST: "fan_in_parent_failed"}
    (failed,) = beat.occurrences("c")
    (skipped,) = beat.kernel.events(occurrence_id=failed.id, limit=5)
    assert skipped.data["parent"] == "b" and skipped.data["parent_status"] == "dead_letter"


def test_beats_judging_at_once_make_one_occurrence(
    beat: Beat, open_beat: Callable[..., Beat], kernel_url: str
) -> None:
    _define_family(beat)
    beat.tick(beat.minute(1.5))
    _settle(beat, "a", 1)
    _settle(beat, "b", 1)
    kernels = [Kernel.open(kernel_url, clock=ManualClock(beat.minute(1.8))) for _ in range(4)]
    start = threading.Barrier(len(kernels))
    made: list[int] = []

    def judge(kernel: Kernel) -> None:
        start.wait()
        made.extend(kernel.judge_fan_ins().created)

    threads = [threading.Thread(target=judge, args=(k,)) for k in kernels]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for kernel in kernels:
        kernel.close()
    assert len(made) == 1 and [o.id for o in beat.occurrences("c")] == made


@pytest.mark.parametrize(
    ("after", "field"),
    [
        ({"all": ["a", "nope"]}, "after.all"),
        ({"all": ["a", "c"]}, "after.all"),
        ({"all": ["a"]}, "after.all"),
        ({"all": ["a", "b"], "on": "failure"}, "after.on"),
    ],
)
def test_a_bad_fan_in_is_refused_naming_the_field_and_nothing_is_written(
    sqlite_beat: Beat, after: dict[str, object], field: str
) -> None:
    sqlite_beat.define("a")
    sqlite_beat.define("b")
    with pytest.raises(InvalidArgument) as refused:
        sqlite_beat.define("c", schedule=None, after=after)
    assert refused.value.field == field
    assert [j.id for j in sqlite_beat.kernel.list_jobs()] == ["a", "b"]


def test_a_parent_a_fan_in_waits_for_cannot_be_deleted(sqlite_beat: Beat) -> None:
    _define_family(sqlite_beat)
    with pytest.raises(StateConflict, match="wait for 'a'"):
        sqlite_beat.kernel.delete_job("a")
    sqlite_beat.kernel.delete_job("c")
    sqlite_beat.kernel.delete_job("a")
