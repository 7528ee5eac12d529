"""The per-kind result hook: the kernel acts on a kind's result without naming the kind."""

from __future__ import annotations

from typing import Any

import pytest

import kernel  # noqa: F401  (the facade registers the built-in kinds' hooks)
from kernel.occurrences import result_hooks
from kernel.upkeep import watchdog_jobs


def test_a_hook_runs_only_for_a_result_that_carries_its_kind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[tuple[Any, ...]] = []
    monkeypatch.setattr(result_hooks, "_HOOKS", {})
    result_hooks.register("probe", lambda *call: seen.append(call[1:]))
    for result in ({"probe": {"n": 1}}, {"other": 1}, "probe", None, ["probe"]):
        result_hooks.after_success(None, 7, "job", 3, result)  # type: ignore[arg-type]
    assert seen == [(7, "job", 3, {"probe": {"n": 1}})]


def test_the_watchdog_kind_reaches_the_kernel_through_its_hook() -> None:
    assert result_hooks._HOOKS[watchdog_jobs.KIND] is watchdog_jobs.record_report
