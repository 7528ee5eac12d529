"""Loaded into Celery's integration suite by ``bench/celery_suite.py`` (``-p bench.suite_plugin``).

Both sides: every test gets the run's per-test bound (``SUITE_TEST_TIMEOUT`` seconds),
also those Celery marks with its own 300 s (``flaky``), so a side that hangs still ends
in a bounded time; with ``SUITE_RERUNS`` set, a ``flaky`` test is rerun at most that
many times on both sides (Celery's mark reruns a timeout five times). Kernel side
(``SUITE_KERNEL=1``): every app Celery's pytest fixtures build (the session app its
worker runs, each test's app the calls go through) gets ``celery_app.install(app)`` as
it is created, as a project puts the kernel under its existing app;
``KERNEL_ROUTE_TASKS`` and ``KERNEL_DATABASE_URL`` come from the environment. The module
is also the kernel side's Beat app (``celery -A bench.suite_plugin beat``, built on
first use so the pytest process makes no extra app): its dispatch pump hints the steps
that settles make due.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from celery import Celery

from celery_app import install

__all__ = ["pytest_collection_modifyitems", "pytest_configure"]


def pytest_configure(config: Any) -> None:
    if os.environ.get("SUITE_KERNEL") != "1":
        return
    from celery.contrib.testing import app as testing_app

    made = testing_app.TestApp

    def kernel_test_app(*args: Any, **kwargs: Any) -> Celery:
        return install(made(*args, **kwargs))

    # celery.contrib.pytest imports TestApp from this module each time it makes an app.
    testing_app.TestApp = kernel_test_app


def pytest_collection_modifyitems(items: list[Any]) -> None:
    bound = float(os.environ["SUITE_TEST_TIMEOUT"])
    reruns = os.environ.get("SUITE_RERUNS")
    for item in items:
        # pytest-timeout reads the closest marker: put ours in front of Celery's.
        item.add_marker(pytest.mark.timeout(bound), append=False)
        if reruns is not None and item.get_closest_marker("flaky") is not None:
            item.add_marker(pytest.mark.flaky(reruns=int(reruns)), append=False)


def __getattr__(name: str) -> Any:
    # `celery -A bench.suite_plugin beat` looks for `app`.
    if name != "app":
        raise AttributeError(name)
    app = Celery("celery_suite", broker=os.environ["TEST_BROKER"])
    globals()["app"] = install(app)
    return app
