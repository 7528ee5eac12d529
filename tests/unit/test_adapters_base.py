"""The adapter contract: runtime-control declarations, the context, default classification."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from unit.adapter_support import SafePoints, make_context

from adapters.base import (
    CHECKPOINT_V1,
    NO_RUNTIME_CONTROL,
    AdapterError,
    BaseAdapter,
    Cancelled,
    ErrorClass,
    ExecutionContext,
    HandBack,
    RuntimeControl,
    bound_message,
    read_payload,
)
from kernel.spec.payloads import ShellPayload
from kernel.states import Effect


class Echo(BaseAdapter):
    kind = "echo"

    def execute(self, ctx: ExecutionContext) -> Any:
        return {"value": ctx.occurrence.payload["value"], "resumed": ctx.resumed}


def test_builtin_declarations_name_the_kernel_safe_points() -> None:
    assert (
        RuntimeControl("checkpoint_v1", ("before_execute", "adapter_checkpoint")) == CHECKPOINT_V1
    )
    assert RuntimeControl(None, ()) == NO_RUNTIME_CONTROL


@pytest.mark.parametrize(
    ("capability", "safe_points", "complaint"),
    [
        ("checkpoint_v1", (), "at least one safe point"),
        (None, ("before_execute",), "need the checkpoint_v1 capability"),
        ("checkpoint_v1", ("whenever",), "unknown safe points"),
        ("pause_v2", ("before_execute",), "unknown runtime-control capability"),
    ],
)
def test_inconsistent_runtime_control_is_refused(
    capability: str | None, safe_points: tuple[str, ...], complaint: str
) -> None:
    with pytest.raises(ValueError, match=complaint):
        RuntimeControl(capability, safe_points)


def test_checkpoint_offers_the_adapter_checkpoint_safe_point() -> None:
    safe_points = SafePoints()
    ctx = make_context("echo", {"value": 1}, safe_points=safe_points)

    ctx.checkpoint({"row": 10})  # returns normally: nothing is pending
    assert safe_points.seen == [("adapter_checkpoint", {"row": 10})]


def test_checkpoint_propagates_the_runtime_hand_back() -> None:
    ctx = make_context("echo", {}, safe_points=SafePoints(hand_back_at=1))

    with pytest.raises(HandBack, match="paused at adapter_checkpoint"):
        ctx.checkpoint({"row": 10})


def test_checkpoint_of_a_cancelled_occurrence_raises_cancelled_without_storing() -> None:
    safe_points, cancelled = SafePoints(), threading.Event()
    ctx = make_context("echo", {}, safe_points=safe_points, cancelled=cancelled)
    cancelled.set()

    with pytest.raises(Cancelled, match="occurrence 7"):
        ctx.checkpoint({"row": 10})
    assert safe_points.seen == []


def test_default_resume_runs_execute_with_the_checkpoint() -> None:
    ctx = make_context("echo", {"value": 3}, resumed={"row": 10})

    assert Echo().resume(ctx) == {"value": 3, "resumed": {"row": 10}}


def test_an_adapter_without_execute_cannot_be_built() -> None:
    class Incomplete(BaseAdapter):
        kind = "incomplete"

    with pytest.raises(TypeError, match="execute"):
        Incomplete()  # type: ignore[abstract]


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (ValueError("bad row"), ErrorClass(True, "ADAPTER_ERROR", "ValueError: bad row")),
        (KeyError("k"), ErrorClass(True, "ADAPTER_ERROR", "KeyError: 'k'")),
        (RuntimeError(), ErrorClass(True, "ADAPTER_ERROR", "RuntimeError")),
        (
            TimeoutError("read timed out"),
            ErrorClass(True, "TIMEOUT", "read timed out", Effect.UNKNOWN),
        ),
        (Cancelled("stop"), ErrorClass(False, "CANCELLED", "stop")),
        (
            AdapterError("BAD_INPUT", "row 3 is empty", retryable=False),
            ErrorClass(False, "BAD_INPUT", "row 3 is empty"),
        ),
        (
            AdapterError("LEDGER_LOST", "no answer", retryable=True, effect=Effect.UNKNOWN),
            ErrorClass(True, "LEDGER_LOST", "no answer", Effect.UNKNOWN),
        ),
    ],
)
def test_default_classification(exc: BaseException, expected: ErrorClass) -> None:
    assert Echo().classify_error(exc) == expected


def test_messages_are_bounded_after_classification_not_in_it() -> None:
    """classify_error keeps the whole message; the runtime masks it, then bounds it
    (bound_message), so a cut never leaves a piece of a secret (issue 41 item 6)."""
    error = Echo().classify_error(ValueError("x" * 10_000))
    assert error.message == "ValueError: " + "x" * 10_000
    bounded = bound_message(error.message)
    assert len(bounded) == 2000 and bounded.endswith("...")


def test_read_payload_uses_the_kind_s_model_and_refuses_a_bad_snapshot() -> None:
    shell = read_payload({"argv": ["true"], "env_allow": ["TZ"]}, ShellPayload)
    assert (shell.argv, shell.env_allow, shell.output_limit) == (["true"], ["TZ"], 65536)
    with pytest.raises(AdapterError, match="payload.argv: is required") as missing:
        read_payload({"cwd": None}, ShellPayload)
    with pytest.raises(AdapterError, match="payload.output_limit: must be an integer") as mistyped:
        read_payload({"argv": ["true"], "output_limit": "ten"}, ShellPayload)
    for error in (missing.value, mistyped.value):
        assert (error.code, error.retryable) == ("INVALID_PAYLOAD", False)
