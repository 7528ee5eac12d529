"""One occurrence's way from Beat to its settle stays short (tests/occurrence_path.py)."""

from __future__ import annotations

from tests.occurrence_path import modules_on_the_path

#: Measured with ``python -m tests.occurrence_path`` after the merges of session 11 (issue 28:
#: 43 modules before the hot-path change, 38 before the merges). A change that lengthens
#: the way says why and moves this. 35 since session 16: every run arms its process's kill
#: timer (celery_app.kill_timer), the operating system's hold on a run stalled past its lease.
#: 36 since session 21: the plain claim and success take the door's lane
#: (kernel.transitions.fast_lane), whose cut of the layers bench/README.md measures.
#: 37 since session 24: the warm-shutdown request, read from a byte the worker's main
#: process shares with its pool, has its own module (celery_app.warm_shutdown; held_run.py
#: was past the bound with it).
MOST_MODULES = 37


def test_one_occurrence_passes_few_modules_from_beat_to_its_settle() -> None:
    modules = modules_on_the_path()
    assert "celery_app.beat.firings" in modules and modules[-1] == "kernel.occurrences.runs", (
        modules
    )
    assert len(modules) <= MOST_MODULES, modules
    # A plain success owes nothing more: the settle reaches no budget, pool or watchdog code.
    assert not {
        "kernel.limits.budgets",
        "kernel.limits.pools",
        "kernel.upkeep.watchdog_jobs",
    } & set(modules)
