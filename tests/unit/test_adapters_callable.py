"""The callable adapter: import by dotted path, pass the context, checkpoint and hand back."""

from __future__ import annotations

import importlib
import sys
import threading
from typing import Any

import pytest
from unit.adapter_support import SafePoints, make_context

from adapters.base import (
    CHECKPOINT_V1,
    AdapterError,
    Cancelled,
    ErrorClass,
    HandBack,
    read_payload,
)
from adapters.callable import CallableAdapter, _call_of
from kernel import CallablePayload
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


_ADD = "unit.adapter_support:add"


@pytest.mark.parametrize(
    "payload",
    [
        {"callable": _ADD},
        {"callable": _ADD, "args": [1, [2]], "kwargs": {"b": {"c": None}}},
        {"callable": _ADD, "kwargs": {}},
        {"callable": "pkg.mod:Cls.method", "args": []},
        # refused, each with the field the model names
        {"callable": "unit.adapter_support"},
        {"callable": ""},
        {"callable": "x" * 1100 + ":f"},
        {"callable": 7},
        {"callable": _ADD, "args": "12"},
        {"callable": _ADD, "args": None},
        {"callable": _ADD, "kwargs": [1]},
        {"callable": _ADD, "kwargs": {1: 2}},
        {"callable": _ADD, "extra": 1},
        {"args": [1]},
    ],
)
def test_a_stored_payload_is_read_as_its_model_reads_it(payload: dict[str, Any]) -> None:
    """The adapter's own read of a payload (no model per run) answers what the model does:
    the same function and arguments, or the same refusal."""
    try:
        model = read_payload(payload, CallablePayload)
    except AdapterError as refused:
        with pytest.raises(AdapterError) as caught:
            _call_of(payload)
        assert (caught.value.code, caught.value.message) == (refused.code, refused.message)
    else:
        assert _call_of(payload) == (model.callable, model.args, model.kwargs)


def test_the_payload_model_has_the_fields_the_adapter_reads_itself() -> None:
    """The adapter takes a stored payload without its model when it has only these fields
    of these types (adapters/callable.py ``_call_of``): a field or a rule added to the
    model must be added there too."""
    fields = CallablePayload.model_fields
    assert set(fields) == {"callable", "args", "kwargs"}
    assert (fields["args"].annotation, fields["kwargs"].annotation) == (list[Any], dict[str, Any])
    assert not fields["args"].metadata and not fields["kwargs"].metadata


def test_a_run_reads_its_payload_without_the_model_once_its_function_was_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The model's validation per run was most of the adapter's own cost: it reads a
    function's name once per process, not a run's payload each time (fails before: the
    model read every run's)."""
    validated: list[Any] = []
    model_validate = CallablePayload.model_validate

    def counted(value: Any, *args: Any, **kwargs: Any) -> Any:
        validated.append(value)
        return model_validate(value, *args, **kwargs)

    monkeypatch.setattr(CallablePayload, "model_validate", counted)
    target = "unit.adapter_support:add_once_read"
    monkeypatch.setattr("unit.adapter_support.add_once_read", lambda a, b: a + b, raising=False)

    contexts = [make_context("callable", {"callable": target, "args": [n, 1]}) for n in range(3)]
    validated.clear()  # the definitions' own validation

    assert [CallableAdapter().execute(ctx) for ctx in contexts] == [1, 2, 3]
    assert validated == [{"callable": target}]


def test_a_loaded_module_is_taken_from_sys_modules_and_one_still_importing_is_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run of a function whose module is loaded does not go through the import machinery
    (fails before: ``import_module`` every run); a module whose import is still under way
    (in another thread) is asked of ``import_module``, which waits for it."""
    imported: list[str] = []
    import_module = importlib.import_module

    def counted(name: str, *args: Any) -> Any:
        imported.append(name)
        return import_module(name, *args)

    monkeypatch.setattr(importlib, "import_module", counted)
    ctx = make_context("callable", {"callable": _ADD, "args": [1, 2]})
    assert CallableAdapter().execute(ctx) == 3
    assert imported == []

    module = sys.modules["unit.adapter_support"]
    monkeypatch.setattr(module.__spec__, "_initializing", True, raising=False)
    assert CallableAdapter().execute(ctx) == 3
    assert imported == ["unit.adapter_support"]
