"""The task adapter runs a registered Celery task's body in this process."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import celery
import pytest
from unit.adapter_support import SafePoints, make_context

from adapters.base import CHECKPOINT_V1, AdapterError, ErrorClass
from adapters.task import TaskAdapter
from kernel.errors import InvalidArgument


@pytest.fixture
def app() -> Iterator[celery.Celery]:
    # set_as_current=False and shared=False keep these tasks out of every other app.
    app = celery.Celery("t", set_as_current=False)

    @app.task(name="t.where", shared=False)
    def where(x: int, y: int, *, scale: int = 1) -> dict[str, int]:
        return {"sum": (x + y) * scale, "pid": os.getpid()}

    @app.task(name="t.whoami", bind=True, shared=False)
    def whoami(self: celery.Task, greeting: str) -> str:
        return f"{greeting} from {self.name}"

    @app.task(name="t.fail", shared=False)
    def fail() -> None:
        raise ValueError("report source missing")

    yield app
    app.close()


def run(adapter: TaskAdapter, payload: dict[str, Any]) -> Any:
    return adapter.execute(make_context("task", payload))


def test_declares_checkpoint_v1() -> None:
    assert TaskAdapter.runtime_control == CHECKPOINT_V1


def test_runs_the_task_body_in_this_process_with_args_and_kwargs(app: celery.Celery) -> None:
    result = run(TaskAdapter(app), {"task": "t.where", "args": [2, 3], "kwargs": {"scale": 10}})

    assert result == {"sum": 50, "pid": os.getpid()}


def test_a_bound_task_receives_itself(app: celery.Celery) -> None:
    assert run(TaskAdapter(app=app), {"task": "t.whoami", "args": ["hi"]}) == "hi from t.whoami"


def test_an_exception_from_the_body_is_final_as_under_celery(app: celery.Celery) -> None:
    # A task retries only through self.retry() or its autoretry_for.
    adapter = TaskAdapter(app)

    with pytest.raises(AdapterError) as caught:
        run(adapter, {"task": "t.fail"})

    assert adapter.classify_error(caught.value) == ErrorClass(
        False, "TASK_FAILED", "ValueError: report source missing"
    )
    assert isinstance(caught.value.__cause__, ValueError)


def test_an_unregistered_task_is_not_retryable(app: celery.Celery) -> None:
    adapter = TaskAdapter(app)

    with pytest.raises(AdapterError) as caught:
        run(adapter, {"task": "t.renamed"})

    error = adapter.classify_error(caught.value)
    assert (error.retryable, error.code) == (False, "TASK_NOT_REGISTERED")
    assert "'t.renamed'" in error.message


def test_without_an_app_nothing_is_registered() -> None:
    with pytest.raises(AdapterError, match="without a Celery app") as caught:
        run(TaskAdapter(), {"task": "t.where"})
    assert caught.value.code == "TASK_NOT_REGISTERED"


def test_a_payload_without_a_task_name_is_refused_when_the_job_is_defined() -> None:
    with pytest.raises(InvalidArgument, match="payload.task: is required"):
        make_context("task", {"args": [1]})


def test_a_task_body_reaches_its_run_through_current_run(app: celery.Celery) -> None:
    from celery_app import current_run

    @app.task(name="t.steps", shared=False, kernel_checkpoints=True)
    def steps() -> dict[str, Any]:
        start = current_run.resumed["done"]
        for done in range(start, 3):
            current_run.checkpoint({"done": done})
        return {"from": start, "occurrence": current_run.occurrence_id}

    points = SafePoints()
    ctx = make_context("task", {"task": "t.steps"}, safe_points=points, resumed={"done": 1})
    assert TaskAdapter(app).execute(ctx) == {"from": 1, "occurrence": ctx.occurrence.id}
    assert points.seen == [("adapter_checkpoint", {"done": 1}), ("adapter_checkpoint", {"done": 2})]
    # Outside a kernel run every call is harmless.
    assert (current_run.active, current_run.resumed, current_run.cancelled) == (False, None, False)
    current_run.checkpoint({"done": 0})


def test_only_a_task_that_opts_in_declares_a_safe_point_inside_its_body(
    app: celery.Celery,
) -> None:
    @app.task(name="t.opted", shared=False, kernel_checkpoints=True)
    def opted() -> None: ...

    adapter = TaskAdapter(app)
    assert adapter.safe_points_for({"task": "t.opted"}) == CHECKPOINT_V1.safe_points
    assert adapter.safe_points_for({"task": "t.where"}) == ("before_execute",)
    assert adapter.safe_points_for({"task": "t.unknown"}) == ("before_execute",)


def test_autoretry_for_decides_retryable_and_celerys_own_retry_never_runs(
    app: celery.Celery,
) -> None:
    calls: list[str] = []

    @app.task(name="t.auto", shared=False, autoretry_for=(OSError,), max_retries=5)
    def auto(error: str) -> None:
        calls.append(error)
        raise {"os": OSError, "value": ValueError}[error]("boom")

    adapter = TaskAdapter(app)
    with pytest.raises(OSError):  # listed: the kernel retries it by its policy
        run(adapter, {"task": "t.auto", "args": ["os"]})
    with pytest.raises(AdapterError) as final:  # not listed: final, as under Celery
        run(adapter, {"task": "t.auto", "args": ["value"]})
    assert (final.value.code, final.value.retryable) == ("TASK_FAILED", False)
    assert calls == ["os", "value"], "each body ran once: no Celery retry"
