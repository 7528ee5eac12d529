"""Two Beats record the watchdog's findings at the same instant: each finding once.

Every Beat runs the watchdog, and ``record_watchdog`` appends an event only for a finding
it has not recorded before. Released together on PostgreSQL, two recorders without a turn
each both read "not recorded yet" and both append.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.kernel.race_world import World, world, world_factory

__all__ = ["world", "world_factory"]  # fixtures

pytestmark = pytest.mark.timeout(240)


def test_two_recorders_append_each_finding_once(world: World) -> None:
    kernel, clock = world.stage.kernel, world.clock

    def round_(i: int) -> None:
        # A new overdue cursor and a new run past its timeout each round.
        late, slow = f"late-{i}", f"slow-{i}"
        kernel.define_job(
            {"id": late, "kind": "callable", "payload": {"callable": "jobs.sample:run"},
             "schedule": {"every": "1m"}}
        )  # fmt: skip
        kernel.define_job(
            {"id": slow, "kind": "callable", "payload": {"callable": "jobs.sample:run"},
             "timeout": "10s", "lease": "1h"}
        )  # fmt: skip
        # Beat plans the cursor one minute ahead; nobody fires it again.
        at = clock.now + timedelta(minutes=1)
        report = kernel.fire(late, expected_revision=1, expected_cursor=None, firings=[],
                             next_cursor=(f"cron:{at.isoformat()}", at))  # fmt: skip
        assert not report.stale
        occ_id = kernel.run_now(slow, request_id=f"rn-{i}", operator="ops").occurrence.id
        claim = kernel.claim(occ_id, owner="w")
        assert claim is not None
        clock.advance(120)  # 30 s past both the cursor and the timeout, with their grace
        first, second = world.race(
            i,
            lambda k: k.record_watchdog(grace=30),
            lambda k: k.record_watchdog(grace=30),
            hold=None,
        )
        assert first.ok and second.ok, (i, first, second)
        assert first.value["new_events"] + second.value["new_events"] == 2, (i, first, second)
        overdue = [e for e in kernel.events(job_id=late) if e.type == "watchdog_overdue"]
        overrun = [e for e in kernel.events(job_id=slow) if e.type == "watchdog_overrun"]
        assert len(overdue) == 1 and len(overrun) == 1, (i, overdue, overrun)
        # Settled, so that the next round's findings are the only new ones.
        kernel.set_job_enabled(late, False)
        kernel.succeed(occ_id, owner="w", fence=claim.fence)

    world.repeat(round_, rounds=30)
