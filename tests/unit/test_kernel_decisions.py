"""One home per kernel decision (issue 37): no registry or re-export stands between a
caller and the code that decides."""

from __future__ import annotations

import importlib.util

from kernel.transitions import occurrences as table


def test_a_watchdog_report_needs_no_registry_of_result_hooks() -> None:
    # The facade composes the settle with the watchdog's report (kernel.facade.workers).
    assert importlib.util.find_spec("kernel.occurrences.result_hooks") is None


def test_the_table_does_not_re_export_the_doors_run() -> None:
    for name in ("run", "run_all", "run_count", "run_many"):
        assert not hasattr(table, name), name
