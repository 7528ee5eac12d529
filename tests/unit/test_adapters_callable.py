"""The callable adapter: import by dotted path, pass the context, checkpoint and hand back."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from unit.adapter_support import SafePoints, make_context

from adapters.base import CHECKPOINT_V1, AdapterError, Cancelled, ErrorClass, HandBack
from adapters.callable import CallableAdapter
from kernel.errors import InvalidArgument


def run(payload: dict[str, Any], **context: Any) -> Any:
    return CallableAdapter().execute(make_context("callable", payload, **context))


def test_declares_checkpoint_v1() -> None:
    assert CallableAdapter.runtime_control == CHECKPOINT_V1


def test_calls_the_function_with_args_and_kwargs() -> None:
    assert run({"callable": "unit.adapter_support:add", "args": [2, 3]}) == 5
    assert run({"callable": "unit.adapter_support:add", "args": [2], "kwargs": {"b": 40}}) == 42


def test_a_function_with_a_ctx_parameter_receives_the_context() -> None:
    safe_points = SafePoints()

    result = run(
        {"callable": "unit.adapter_support:count_to", "args": [3]}, safe_points=safe_points
    )

    assert result == {"done": 3, "started_at": 0, "job_id": "nightly"}
    assert safe_points.seen == [("adapter_checkpoint", {"done": n}) for n in (1, 2, 3)]


def test_resume_calls_the_same_function_which_reads_the_checkpoint() -> None:
    safe_points = SafePoints()
    ctx = make_context(
        "callable",
        {"callable": "unit.adapter_support:count_to", "args": [3]},
        safe_points=safe_points,
        resumed={"done": 2},
    )

    assert CallableAdapter().resume(ctx) == {"done": 3, "started_at": 2, "job_id": "nightly"}
    assert safe_points.seen == [("adapter_checkpoint", {"done": 3})]


def test_hand_back_passes_through_job_code_that_catches_exception() -> None:
    payload = {"callable": "unit.adapter_support:swallow_errors"}

    assert run(payload) == "finished"
    with pytest.raises(HandBack):
        run(payload, safe_points=SafePoints(hand_back_at=1))


def test_cancellation_surfaces_at_the_next_checkpoint() -> None:
    cancelled = threading.Event()
    cancelled.set()
    adapter = CallableAdapter()

    with pytest.raises(Cancelled) as caught:
        run({"callable": "unit.adapter_support:count_to", "args": [3]}, cancelled=cancelled)

    assert adapter.classify_error(caught.value).code == "CANCELLED"
    assert adapter.classify_error(caught.value).retryable is False


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("adapter_no_such_module:run", "ModuleNotFoundError"),
        ("unit.adapter_support:no_such_function", "AttributeError"),
        ("unit.adapter_support:_NOW", "datetime object is not callable"),
    ],
)
def test_an_unloadable_callable_is_not_retryable(target: str, reason: str) -> None:
    adapter = CallableAdapter()

    with pytest.raises(AdapterError) as caught:
        adapter.execute(make_context("callable", {"callable": target}))

    error = adapter.classify_error(caught.value)
    assert (error.retryable, error.code) == (False, "CALLABLE_NOT_FOUND")
    assert target in error.message and reason in error.message


def test_a_malformed_target_is_refused_when_the_job_is_defined() -> None:
    with pytest.raises(InvalidArgument) as caught:
        make_context("callable", {"callable": "unit.adapter_support"})
    assert caught.value.field == "payload.callable"


def test_payload_may_not_override_the_context() -> None:
    payload = {"callable": "unit.adapter_support:count_to", "args": [1], "kwargs": {"ctx": 1}}

    with pytest.raises(AdapterError, match="may not set 'ctx'") as caught:
        run(payload)
    assert caught.value.code == "INVALID_PAYLOAD"


def test_errors_from_the_function_are_retryable_by_default() -> None:
    adapter = CallableAdapter()

    with pytest.raises(TypeError) as caught:
        adapter.execute(
            make_context("callable", {"callable": "unit.adapter_support:add", "args": [1]})
        )

    assert adapter.classify_error(caught.value) == ErrorClass(
        True, "ADAPTER_ERROR", f"TypeError: {caught.value}"
    )
