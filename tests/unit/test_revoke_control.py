"""The worker's ``revoke`` control command of an app the kernel is installed on (issue 40):
routed ids are cancelled by the kernel (answered by name) and, with every other id, given to
Celery's own handler; a running routed run is asked to stop with ``terminate``, whatever
the signal. The command is Celery's own registered handler, called with the state
Celery's pidbox gives it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.utils.collections import AttributeDict
from celery.worker import state as worker_state
from celery.worker.control import Panel

from celery_app import install
from celery_app.enqueueing import process_kernel
from kernel import Kernel


@pytest.fixture
def app(tmp_path: Path) -> Any:
    url = f"sqlite:///{tmp_path}/kernel.db"
    Kernel.open(url, migrate_schema=True).close()
    made = Celery("rv", broker="memory://", backend="cache+memory://", set_as_current=False)
    made.conf.update(kernel_database_url=url, kernel_route_tasks=["rv.*"])
    install(made)
    made.task(name="rv.slow", shared=False)(_body)
    return made


def _body() -> None:
    """Never run here: the tests only enqueue it."""


def _revoke(app: Any, task_id: str, **options: Any) -> Any:
    state = AttributeDict(app=app, hostname="w1@test", consumer=None)
    return Panel.data["revoke"](state, task_id, **options)


def test_a_routed_id_is_cancelled_by_the_kernel_and_every_id_is_celerys_too(app: Any) -> None:
    app.tasks["rv.slow"].apply_async(task_id="routed-1")
    kernel = process_kernel(app)
    [run] = kernel.list_occurrences(limit=10)
    answer = _revoke(app, ["routed-1", "stock-1"])
    assert kernel.get_occurrence(run.id).status.value == "cancelled"
    # Celery flags both as it always does: the run's own hint has the routed id.
    assert "stock-1" in worker_state.revoked and "routed-1" in worker_state.revoked
    assert answer["ok"].endswith("; routed runs routed-1 (cancelled)"), answer
    assert _revoke(app, "routed-1")["ok"].endswith("routed runs routed-1 (cancelled)")


def test_terminate_asks_a_running_routed_run_to_stop_whatever_the_signal(app: Any) -> None:
    app.tasks["rv.slow"].apply_async(task_id="routed-2")
    kernel = process_kernel(app)
    [run] = kernel.list_occurrences(limit=10)
    assert kernel.claim(run.id, owner="w1", lease=30) is not None
    assert _revoke(app, "routed-2")["ok"].endswith("routed runs routed-2 (running)")
    assert not kernel.get_occurrence(run.id).cancel_requested  # no terminate: it runs on
    answer = _revoke(app, "routed-2", terminate=True, signal="KILL")
    assert answer["ok"].endswith("routed runs routed-2 (running)"), answer
    assert kernel.get_occurrence(run.id).cancel_requested
