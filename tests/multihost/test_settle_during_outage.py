"""Found by the chaos run: a settle refused by a PostgreSQL restart printed a traceback.

During ``pg_immediate`` / ``pg_fast`` the worker logs showed ``Task kernel.run_occurrence
raised unexpected: KernelError(...)`` with a traceback for each run that finished (or
was claimed) while the server was down: STORAGE_UNAVAILABLE escaped the task. It is an
outage, not a bug, and the kernel's recovery already covers it (the lease's expiry
decides the run), so the worker now says so in one line (``celery_app/tasks.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from integration.stack import Stack
from servers import ServerUnavailable, start_postgres, unavailable

from kernel import Kernel


@pytest.mark.timeout(120)
def test_a_settle_during_a_database_outage_is_one_warning_and_no_traceback(
    tmp_path: Path, redis_url: str
) -> None:
    try:
        server = start_postgres()
    except ServerUnavailable as exc:
        unavailable(str(exc))
    stack = Stack(tmp_path, broker_url=redis_url, database_url=server.url)
    try:
        Kernel.open(server.url, migrate_schema=True).close()
        stack.use_jobs(stack.job("slow", "record", kwargs={"sleep": 4.0}, lease="60s"))
        worker = stack.start_worker("worker")
        stack.start_beat("beat")
        occurrence_id = stack.run_now("slow")
        stack.wait(lambda: stack.ledger(event="run"), timeout=40, what="the run's effect")
        server.process.send_signal(server.stop_signal)  # fast shutdown: clients are cut off
        server.process.wait(30)
        line = re.compile(rf"occurrence {occurrence_id}: STORAGE_UNAVAILABLE: .*lease's expiry")
        stack.wait(
            lambda: line.search(worker.log()) or "Traceback" in worker.log(),
            timeout=40,
            what="the refused settle's warning",
        )
        assert "Traceback" not in worker.log(), worker.tail()
        assert line.search(worker.log()), worker.tail()
    finally:
        stack.close()
        server.stop()
