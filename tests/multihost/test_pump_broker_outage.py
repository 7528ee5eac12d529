"""Found by the chaos run: Beat's pump printed a traceback for every tick Redis was down.

During ``redis_kill_lost`` / ``redis_kill_kept`` the Beat logs showed ``beat step _pump
failed; the tick goes on`` with a chained redis/kombu traceback: a broker outage was
reported as a bug. The hints stay marked and are sent again after ``rehint_after``, so
the pump now says that in one warning (``celery_app/beat/firings.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from integration.stack import Stack
from servers import ServerUnavailable, start_redis, unavailable


@pytest.mark.timeout(120)
def test_a_broker_outage_is_one_warning_per_tick_and_no_traceback(tmp_path: Path) -> None:
    try:
        broker = start_redis()
    except ServerUnavailable as exc:
        unavailable(str(exc))
    stack = Stack(tmp_path, broker_url=broker.url, database_url=None)
    try:
        stack.use_jobs(stack.job("every-second", "record", schedule={"every": "1s"}))
        beat = stack.start_beat("beat")
        broker.process.kill()  # a crash: connections are cut, new ones refused
        broker.process.wait(10)
        stack.wait(
            lambda: "broker unavailable" in beat.log() or "Traceback" in beat.log(),
            timeout=40,
            what="the pump meeting the stopped broker",
        )
        assert "Traceback" not in beat.log(), beat.tail()
        assert "they are sent again after" in beat.log(), beat.tail()
    finally:
        stack.close()
        broker.stop()
