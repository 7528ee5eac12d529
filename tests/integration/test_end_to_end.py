"""Real Celery workers and Beats run `every` jobs: each firing runs once, none is missing."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from integration.stack import Stack

from kernel import Occurrence

pytestmark = pytest.mark.long


def firing_time(trigger_key: str) -> datetime:
    """``every:2026-11-29T13:39:30Z`` -> that instant (naive UTC)."""
    kind, _, at = trigger_key.partition(":")
    assert kind == "every", trigger_key
    return datetime.fromisoformat(at.removesuffix("Z"))


def assert_each_firing_ran_once(stack: Stack, job_id: str, every: timedelta) -> list[Occurrence]:
    """One occurrence per slot, no slot missing, one ledger line each, results in the kernel."""
    occurrences = stack.occurrences(job_id)
    keys = [o.trigger_key for o in occurrences]
    assert len(keys) == len(set(keys)), "two occurrences for one firing"
    times = sorted(firing_time(key) for key in keys)
    gaps = [(a, b) for a, b in zip(times, times[1:], strict=False) if b - a != every]
    assert not gaps, f"firings missing or off the {every} grid between: {gaps}"
    for occurrence in occurrences:
        lines = stack.ledger(trigger_key=occurrence.trigger_key)
        if occurrence.status.value == "queued":  # fired before the job was disabled
            assert occurrence.fence == 0 and lines == [], occurrence.to_dict()
            continue
        assert occurrence.status.value == "succeeded", occurrence.to_dict()
        assert [line["fence"] for line in lines] == [occurrence.fence], occurrence.trigger_key
        assert (occurrence.fence, occurrence.attempt) == (1, 1)
        assert occurrence.result == {
            "trigger_key": occurrence.trigger_key,
            "fence": occurrence.fence,
        }
    ran = [o for o in occurrences if o.status.value != "queued"]
    assert len(stack.ledger(job_id=job_id)) == len(ran), "an effect without an occurrence"
    return occurrences


def stop_scheduling(stack: Stack, job_id: str) -> None:
    """Disable the job (Beat keeps pumping) and wait until everything it fired has settled,
    but for a firing made just before the disable and not claimed yet: a disabled job's
    queued occurrence waits for the job to be enabled again (never run meanwhile)."""
    stack.kernel.set_job_enabled(job_id, False)
    stack.wait(
        lambda: stack.settled(job_id, but=frozenset({"queued"})),
        timeout=20,
        what=f"{job_id} occurrences settled",
    )


def ledger_span(stack: Stack, job_id: str) -> timedelta:
    """Time from the first to the last firing that ran (pool processes finish out of order)."""
    times = [firing_time(line["trigger_key"]) for line in stack.ledger(job_id=job_id)]
    return max(times) - min(times) if times else timedelta(0)


#: Every second; every firing gets an occurrence even if the last one is still running or a
#: tick comes late, so a gap or a duplicate can only come from how Beats materialise firings.
EVERY_SECOND: dict[str, Any] = {
    "schedule": {"every": "1s"},
    "overlap": "allow",
    "catchup": {"policy": "all", "window": "1h"},
}


@pytest.mark.parametrize(
    "stack", ["embedded", "redis", "redis+postgres", "rabbitmq+postgres"], indirect=True
)
def test_every_job_runs_each_firing_exactly_once(stack: Stack) -> None:
    stack.use_jobs(
        stack.job(
            "tick", "record", lease="6s", delivery="at-most-once", max_attempts=3, **EVERY_SECOND
        )
    )
    # The worker first: on a fresh database each process migrates at start.
    stack.start_worker("worker", concurrency=2)
    stack.start_beat("beat")
    stack.wait(lambda: len(stack.ledger(job_id="tick")) >= 4, timeout=20, what="four runs of tick")
    stop_scheduling(stack, "tick")

    occurrences = assert_each_firing_ran_once(stack, "tick", timedelta(seconds=1))
    assert len(occurrences) >= 4
    events = stack.event_types(occurrences[0].id)
    assert [t for t, _ in events if t.startswith("occurrence_")] == [
        "occurrence_created",
        "occurrence_claimed",
        "occurrence_succeeded",
    ]


def test_two_beats_neither_duplicate_nor_miss_a_firing(stack: Stack) -> None:
    stack.use_jobs(stack.job("every-second", "record", lease="5s", **EVERY_SECOND))
    stack.start_worker("worker", concurrency=2)
    beats = [stack.start_beat("beat-a"), stack.start_beat("beat-b")]
    stack.wait(
        lambda: ledger_span(stack, "every-second") >= timedelta(seconds=30),
        timeout=50,
        what="30 seconds of firings",
    )
    ticking = {beat.id for beat in stack.kernel.beats()}
    assert all(any(f":{proc.pid}:" in beat_id for beat_id in ticking) for proc in beats), ticking
    stop_scheduling(stack, "every-second")

    occurrences = assert_each_firing_ran_once(stack, "every-second", timedelta(seconds=1))
    assert len(occurrences) >= 31
