"""bench/celery_suite.py's reading of pytest's junit XML and its table."""

from __future__ import annotations

from pathlib import Path

from bench.celery_suite import Outcome, outcomes, table

_JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="t.integration.test_tasks.test_tasks" name="test_simple_call" time="0.1"/>
<testcase classname="t.integration.test_tasks.test_tasks" name="test_fail" time="30">
  <failure message="Failed: Timeout (&gt;30.0s) from pytest-timeout.&#10;more">tb</failure>
</testcase>
<testcase classname="t.integration.test_tasks.test_tasks" name="test_fail" time="0">
  <error message="failed on teardown with &quot;x&quot;">tb</error>
</testcase>
<testcase classname="t.integration.test_canvas" name="test_chain_on_error" time="0">
  <skipped message="needs a chord backend">skip</skipped>
</testcase>
</testsuite></testsuites>
"""


def test_outcomes_keep_the_call_outcome_and_the_first_line(tmp_path: Path) -> None:
    junit = tmp_path / "kernel.xml"
    junit.write_text(_JUNIT)
    found = outcomes(junit)
    assert found == {
        "test_tasks.py::test_tasks::test_simple_call": Outcome("passed", ""),
        # The teardown error after the timeout does not hide the call's failure.
        "test_tasks.py::test_tasks::test_fail": Outcome(
            "failed", "Failed: Timeout (>30.0s) from pytest-timeout."
        ),
        "test_canvas.py::test_chain_on_error": Outcome("skipped", "needs a chord backend"),
    }
    assert outcomes(tmp_path / "missing.xml") == {}


def test_table_counts_each_side_and_what_only_stock_passes() -> None:
    stock = {"a.py::t1": Outcome("passed", ""), "a.py::t2": Outcome("passed", "")}
    kernel = {"a.py::t1": Outcome("failed", "INVALID_ARGUMENT: x | y")}
    text = table({"stock": stock, "kernel": kernel})
    assert "| a.py::t1 | passed | failed | INVALID_ARGUMENT: x \\| y |" in text
    assert "| a.py::t2 | passed | not run |  |" in text
    assert "| passed | 2 | 0 |" in text
    assert "| not run | 0 | 1 |" in text
    assert "| passed stock, not kernel | 2 | |" in text
