"""The watchdog: overdue firings, runs past their timeout, the adjudication backlog;
each finding recorded as an event once."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.kernel.conftest import Harness


def _fire_and_take(k: Harness, job_id: str) -> None:
    """A firing a worker takes at once (left queued, it would be ``stranded`` too)."""
    for occurrence_id in k.fire(job_id).created:
        assert k.kernel.claim(occurrence_id, owner="w1", lease=3600) is not None


def test_an_overdue_cursor_is_found_and_recorded_once_per_cursor(k: Harness) -> None:
    k.define("late", schedule={"every": "1m"})
    _fire_and_take(k, "late")  # the cursor now points one minute ahead
    assert k.kernel.watchdog(grace=30)["overdue_firings"] == 0
    k.clock.advance(60 + 31)
    found = k.kernel.record_watchdog(grace=30)
    assert found["overdue_firings"] == 1 and found["new_events"] == 1
    [late] = found["overdue"]
    assert late["job_id"] == "late" and late["late_ms"] == 31_000
    assert k.kernel.record_watchdog(grace=30)["new_events"] == 0
    # Beat catches up: the next late cursor is a new finding.
    _fire_and_take(k, "late")
    k.clock.advance(3600)
    assert k.kernel.record_watchdog(grace=30)["new_events"] == 1
    events = [e for e in k.kernel.events(job_id="late") if e.type == "watchdog_overdue"]
    assert len(events) == 2 and events[0].data["trigger_key"] != events[1].data["trigger_key"]


def test_a_run_past_its_timeout_is_found_once_per_fence(k: Harness) -> None:
    k.define("slow", timeout="10s", lease="1h")
    claim = k.running("slow", lease=3600)
    k.define("free", lease="1h")
    k.running("free", lease=3600)  # no timeout: never overrunning
    k.clock.advance(10 + 5)
    assert k.kernel.watchdog(grace=10)["overrunning"] == []
    k.clock.advance(6)
    found = k.kernel.record_watchdog(grace=10)
    assert [(r["occurrence_id"], r["fence"]) for r in found["overrunning"]] == [
        (claim.occurrence.id, claim.fence)
    ]
    assert found["new_events"] == 1
    assert k.kernel.record_watchdog(grace=10)["new_events"] == 0
    assert "watchdog_overrun" in k.event_types(claim.occurrence.id)


def test_the_adjudication_backlog_is_counted_with_its_age(k: Harness) -> None:
    claim = k.running("once", delivery="at-most-once", lease=30)
    assert k.kernel.watchdog()["needs_adjudication"] == 0
    k.clock.advance(31)
    k.kernel.expire_leases()
    k.clock.advance(100)
    found = k.kernel.watchdog()
    assert found["needs_adjudication"] == 1
    assert found["oldest_adjudication_age_ms"] == 100_000
    assert k.kernel.get_occurrence(claim.occurrence.id).status == "needs_adjudication"


def test_a_run_past_the_default_timeout_is_found_when_its_job_sets_none(k: Harness) -> None:
    """Workers bound a job without ``timeout`` by ``kernel_default_timeout``; the watchdog
    reports its overrun by the same bound (issue 39 item 12); a job's own wins."""
    k.define("bounded-by-default", lease="1h")
    claim = k.running("bounded-by-default", lease=3600)
    k.define("own", timeout="1h", lease="1h")
    k.running("own", lease=3600)  # its own timeout, longer than the default
    k.clock.advance(60 + 5)
    assert k.kernel.watchdog(grace=10, default_timeout=60)["overrunning"] == []
    k.clock.advance(6)
    assert k.kernel.watchdog(grace=10)["overrunning"] == []  # no default: unbounded
    found = k.kernel.record_watchdog(grace=10, default_timeout=60)
    assert [(r["occurrence_id"], r["over_ms"]) for r in found["overrunning"]] == [
        (claim.occurrence.id, 11_000)
    ]
    assert "watchdog_overrun" in k.event_types(claim.occurrence.id)
