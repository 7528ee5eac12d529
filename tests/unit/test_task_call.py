"""A task body the kernel runs is called as Celery's worker calls it (celery_app.task_call)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import celery
import pytest
from celery import signals
from unit.adapter_support import make_context

from adapters.base import AdapterError
from adapters.task import TaskAdapter
from celery_app.task_call import call_task, hook_task_methods, task_id


@pytest.fixture
def app() -> Iterator[celery.Celery]:
    hook_task_methods()  # as install(app) does at start-up
    app = celery.Celery("t", set_as_current=False)
    yield app
    app.close()


@pytest.fixture
def sent() -> Iterator[list[tuple[str, str]]]:
    seen: list[tuple[str, str]] = []
    receivers = []
    for name in ("task_prerun", "task_postrun", "task_success", "task_failure", "task_retry"):

        def receiver(sender: Any = None, _name: str = name, **_: Any) -> None:
            seen.append((_name, sender.name))

        getattr(signals, name).connect(receiver, weak=False)
        receivers.append((name, receiver))
    yield seen
    for name, receiver in receivers:
        getattr(signals, name).disconnect(receiver)


def _adapter(app: celery.Celery) -> TaskAdapter:
    adapter = TaskAdapter(app)
    adapter.call = call_task
    return adapter


def test_retry_at_an_eta_is_a_kernel_retry_at_that_time_and_sends_nothing(
    app: celery.Celery, sent: list[tuple[str, str]]
) -> None:
    seen: list[Any] = []

    @app.task(name="t.later", bind=True, shared=False, max_retries=2)
    def later(self: celery.Task, n: int) -> None:
        seen.append((self.request.id, self.request.retries, self.request.args))
        raise self.retry(exc=OSError("busy"), eta=datetime.now(UTC) + timedelta(seconds=30))

    ctx = make_context("task", {"task": "t.later", "args": [5]}, attempt=2)
    with pytest.raises(AdapterError) as caught:
        _adapter(app).execute(ctx)

    error = caught.value
    assert (error.code, error.retryable) == ("TASK_RETRY", True)
    assert error.retry_in is not None and 25 < error.retry_in <= 30
    assert seen == [(task_id(ctx), 1, [5])]
    assert sent == [("task_prerun", "t.later"), ("task_retry", "t.later"),
                    ("task_postrun", "t.later")]  # fmt: skip


def test_retry_past_max_retries_raises_the_exc_given_as_a_final_failure(
    app: celery.Celery, sent: list[tuple[str, str]]
) -> None:
    @app.task(name="t.spent", bind=True, shared=False, max_retries=1)
    def spent(self: celery.Task) -> None:
        raise self.retry(exc=ValueError("still bad"), countdown=1)

    with pytest.raises(AdapterError) as caught:
        _adapter(app).execute(make_context("task", {"task": "t.spent"}, attempt=2))

    assert (caught.value.code, caught.value.retryable) == ("TASK_FAILED", False)
    assert caught.value.message == "ValueError: still bad"
    assert [name for name, _ in sent] == ["task_prerun", "task_failure", "task_postrun"]


def test_retry_with_new_arguments_hands_them_to_the_kernel_and_is_not_eager(
    app: celery.Celery,
) -> None:
    """``self.retry(args=...)`` / ``(kwargs=...)``: the arguments Celery's retry signature
    carries (its own merge of old and new) go with the kernel retry; the body sees
    ``is_eager`` False, as under a worker, and nothing is sent."""
    seen: list[bool] = []

    @app.task(name="t.switch", bind=True, shared=False, max_retries=1)
    def switch(self: celery.Task, foo: int, bar: int, label: str | None = None) -> None:
        seen.append(self.request.is_eager)
        raise self.retry(args=(foo + 1, bar + 1), countdown=0)

    ctx = make_context("task", {"task": "t.switch", "kwargs": {"foo": 1, "bar": 2,
                                                              "label": "kept"}})  # fmt: skip
    with pytest.raises(AdapterError) as caught:
        _adapter(app).execute(ctx)
    assert caught.value.retry_with == {"args": [2, 3], "kwargs": {"label": "kept"}}
    assert seen == [False]

    @app.task(name="t.same", bind=True, shared=False, max_retries=1)
    def same(self: celery.Task, n: int) -> None:
        raise self.retry(countdown=0)

    with pytest.raises(AdapterError) as unchanged:
        _adapter(app).execute(make_context("task", {"task": "t.same", "args": [1]}))
    assert unchanged.value.retry_with is None  # nothing new to store


def test_reject_with_requeue_gives_the_run_back_and_its_next_run_is_redelivered(
    app: celery.Celery, sent: list[tuple[str, str]]
) -> None:
    """``raise Reject(requeue=True)``: no failure and nothing stored, the run goes back to
    the queue (Redeliver: the runtime hands it back, spending no attempt); the run that
    takes it back sees ``delivery_info["redelivered"]``, as Celery's redelivered message
    shows it. ``Reject(requeue=False)`` is the task's final failure, as in Celery."""
    from celery.exceptions import Reject

    from adapters.base import Redeliver

    states: list[str] = []
    signals.task_postrun.connect(
        lambda state=None, **_: states.append(state), weak=False, dispatch_uid="t.rejects"
    )

    @app.task(name="t.rejects", bind=True, shared=False, acks_late=True)
    def rejects(self: celery.Task) -> str:
        if not (self.request.delivery_info or {}).get("redelivered"):
            raise Reject(requeue=True)
        return "second-pass"

    try:
        with pytest.raises(Redeliver):
            _adapter(app).execute(make_context("task", {"task": "t.rejects"}))
        again = make_context("task", {"task": "t.rejects"}, redelivered=True)
        assert _adapter(app).execute(again) == "second-pass"
    finally:
        signals.task_postrun.disconnect(dispatch_uid="t.rejects")
    assert states == ["REJECTED", "SUCCESS"]
    assert [name for name, _ in sent][:2] == ["task_prerun", "task_postrun"]  # no failure

    @app.task(name="t.refuses", shared=False)
    def refuses() -> None:
        raise Reject("rejected", requeue=False)

    with pytest.raises(AdapterError) as caught:
        _adapter(app).execute(make_context("task", {"task": "t.refuses"}))
    assert (caught.value.code, caught.value.retryable) == ("TASK_FAILED", False)


def test_add_to_chord_inside_a_kernel_run_is_refused_by_name(app: celery.Celery) -> None:
    @app.task(name="t.grows", bind=True, shared=False)
    def grows(self: celery.Task) -> None:
        self.add_to_chord(app.signature("t.other"))

    with pytest.raises(AdapterError) as caught:
        _adapter(app).execute(make_context("task", {"task": "t.grows"}))

    assert caught.value.code == "TASK_FAILED"
    assert "add_to_chord" in caught.value.message and "kernel_route_tasks" in caught.value.message


def test_tagged_bytes_reach_the_body_as_bytes(app: celery.Celery) -> None:
    seen: list[Any] = []

    @app.task(name="t.echo", shared=False)
    def echo(value: Any, label: Any = None) -> None:
        seen.append((value, label))

    tagged = {"__type__": "bytes", "__value__": "x"}
    payload = {"task": "t.echo", "args": [tagged], "kwargs": {"label": [tagged]}}
    _adapter(app).execute(make_context("task", payload))

    assert seen == [(b"x", [b"x"])]
