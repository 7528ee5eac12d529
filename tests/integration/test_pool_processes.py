"""A prefork worker's pool processes use the kernel their main process opened and prepared."""

from __future__ import annotations

import pytest
from integration.stack import Stack


@pytest.mark.parametrize("stack", ["redis", "redis+postgres"], indirect=True)
def test_pool_processes_inherit_the_main_process_s_rendered_statements(stack: Stack) -> None:
    # Rendered once before the fork, the statements' pages are shared by every pool
    # process instead of copied into each (bench/end_to_end.py's worker PSS, issue 22).
    worker = stack.start_worker("worker", concurrency=2)
    stack.define(stack.job("probe", "pool_process"))
    occurrence_id = stack.run_now("probe")
    stack.send_hints(occurrence_id)
    stack.wait(lambda: stack.settled("probe"), timeout=30, what="the probe to run")
    done = stack.occurrence(occurrence_id)
    assert done.status.value == "succeeded", done.last_error
    assert done.result is not None
    assert done.result["parent"] == worker.pid != done.result["pid"]  # a pool process ran it
    assert done.result["hint_rendered"] is True
