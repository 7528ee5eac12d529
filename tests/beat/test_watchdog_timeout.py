"""Beat's watchdog bounds a run by the timeout its worker applies: the job's own
``timeout``, else ``kernel_default_timeout`` read from the same settings (issue 39
item 12)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from .conftest import Beat


def test_beat_reports_a_run_past_the_default_timeout(
    open_beat: Callable[..., Beat], kernel_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNEL_DEFAULT_TIMEOUT", "60")
    monkeypatch.setenv("KERNEL_WATCHDOG_GRACE", "10")
    beat = open_beat(kernel_url)
    beat.define(schedule={"every": 3600}, lease="1h")  # no timeout of its own
    run = beat.kernel.run_now("job", request_id="r1", operator="ops").occurrence
    claim = beat.kernel.claim(run.id, owner="w1", lease=3600)
    assert claim is not None

    beat.tick(beat.clock.now + timedelta(seconds=60 + 11))  # Beat's first tick watches

    overruns = [e for e in beat.kernel.events(occurrence_id=run.id) if e.type == "watchdog_overrun"]
    assert [(e.fence, e.data["over_ms"]) for e in overruns] == [(claim.fence, 11_000)]
