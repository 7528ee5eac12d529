"""The adapter contract: what an occurrence runs and the context it runs with.

An adapter is a narrow protocol (``kind``, ``runtime_control``, ``execute``,
``resume``, ``classify_error``, and optionally ``adjudicate``); :class:`BaseAdapter`
gives the defaults so a third-party adapter needs only ``kind`` and ``execute``. The Celery runtime
builds one :class:`ExecutionContext` per claim and owns the ``before_execute``
safe point; adapters and job code reach ``adapter_checkpoint`` through
:meth:`ExecutionContext.checkpoint`.
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from kernel import Adjudication, Effect, InvalidArgument, Occurrence, Payload, SafePoint, Verdict

__all__ = [
    "RuntimeControl",
    "CHECKPOINT_V1",
    "NO_RUNTIME_CONTROL",
    "HandBack",
    "Redeliver",
    "Cancelled",
    "Replaced",
    "AdapterError",
    "ErrorClass",
    "ExecutionContext",
    "AdjudicationContext",
    "Adapter",
    "BaseAdapter",
    "bound_message",
    "read_payload",
    "tail_text",
]

_CAPABILITY_CHECKPOINT_V1 = "checkpoint_v1"
_SAFE_POINTS = frozenset(point.value for point in SafePoint)
#: Error messages end up in ``last_error`` and in CLI output; keep them readable.
_MESSAGE_LIMIT = 2000
P = TypeVar("P", bound=Payload)


@dataclass(frozen=True)
class RuntimeControl:
    """An adapter's declared pause/resume capability.

    A declaration is evidence the kernel relies on when it accepts a pause
    request, so it is checked here: ``checkpoint_v1`` needs at least one known
    safe point and "no capability" (``None``) must declare none.

    Attributes:
        capability: ``"checkpoint_v1"`` or ``None``.
        safe_points: the :class:`~kernel.states.SafePoint` values where the
            adapter may be paused.
    """

    capability: str | None
    safe_points: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.capability not in (None, _CAPABILITY_CHECKPOINT_V1):
            raise ValueError(f"unknown runtime-control capability {self.capability!r}")
        unknown = sorted(set(self.safe_points) - _SAFE_POINTS)
        if unknown:
            raise ValueError(f"unknown safe points {unknown}")
        if self.capability is None and self.safe_points:
            raise ValueError("safe points need the checkpoint_v1 capability")
        if self.capability is not None and not self.safe_points:
            raise ValueError("checkpoint_v1 needs at least one safe point")


CHECKPOINT_V1 = RuntimeControl(
    _CAPABILITY_CHECKPOINT_V1,
    (SafePoint.BEFORE_EXECUTE.value, SafePoint.ADAPTER_CHECKPOINT.value),
)
NO_RUNTIME_CONTROL = RuntimeControl(None, ())


class HandBack(BaseException):
    """The runtime takes the occurrence back at a safe point (pause ack, warm shutdown).

    Raised out of :meth:`ExecutionContext.checkpoint`. It derives from
    ``BaseException`` so that job code's ``except Exception`` cannot swallow it;
    code that must clean up should use ``finally``.
    """


class Redeliver(HandBack):
    """Job code asks for its run to go back to the queue as it was before it started
    (Celery's ``Reject(requeue=True)``): the runtime hands the occurrence back at
    ``before_execute``, spending no attempt, and the run that takes it back sees
    :attr:`ExecutionContext.redelivered`."""


class Cancelled(Exception):
    """The occurrence was cancelled (operator cancel or lost lease) while it ran."""


class Replaced(Exception):  # noqa: N818 - not an error: how a replaced body ends
    """The run replaced itself (Celery's ``self.replace(sig)``): the runtime settles it
    with ``replacement`` (a kernel link signature) whose step with ``task_id``, the run's
    task id, takes that id over (:meth:`kernel.Kernel.replace`)."""

    def __init__(self, replacement: Mapping[str, Any], task_id: str) -> None:
        super().__init__(f"replaced by {replacement.get('task')}")
        self.replacement = replacement
        self.task_id = task_id


@dataclass(frozen=True)
class ErrorClass:
    """How the kernel should treat a failure.

    Attributes:
        retryable: False sends the occurrence straight to dead letter.
        code: stable upper-case identifier stored as ``last_error.code``.
        message: a sentence for the operator.
        effect: what the failed run is known to have done (:class:`kernel.states.Effect`):
            an at-most-once occurrence whose effect is ``unknown`` waits for a verdict
            (``needs_adjudication``, the adapter's ``adjudicate`` asked first) instead of
            retrying; one whose effect is ``applied`` is not retried.
        retry_in: seconds before the retry, when the job code chose them (a Celery task's
            ``self.retry(countdown=...)``); else the job's backoff policy decides.
        retry_with: the arguments the retry runs with (``{"args", "kwargs"}``), when a
            task's code gave new ones (``self.retry(args=..., kwargs=...)``).
    """

    retryable: bool
    code: str
    message: str
    effect: Effect = Effect.NOT_APPLIED
    retry_in: float | None = None
    retry_with: Mapping[str, Any] | None = None


class AdapterError(Exception):
    """A failure an adapter (or job code) has already classified.

    :meth:`BaseAdapter.classify_error` turns it into its :class:`ErrorClass`
    unchanged, so raising ``AdapterError("BAD_INPUT", "...", retryable=False)``
    from a callable job dead-letters it without burning retries, and
    ``effect=Effect.UNKNOWN`` says the job cannot tell whether its effect happened;
    ``retry_in`` sets the delay before a retry instead of the job's backoff,
    ``retry_with`` the arguments the retry runs with (:class:`ErrorClass`).
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        retryable: bool,
        effect: Effect = Effect.NOT_APPLIED,
        retry_in: float | None = None,
        retry_with: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retryable = retryable
        self.effect = effect
        self.retry_in = retry_in
        self.retry_with = retry_with


class ExecutionContext:
    """What an adapter (and the job code it runs) sees of its occurrence.

    Attributes:
        occurrence: the claimed occurrence (``id``, ``job_id``, ``trigger_key``,
            ``scheduled_for``, ``attempt``, ``fence``, ``payload``).
        resumed: the data of the occurrence's newest stored checkpoint (given by an
            earlier run of it, at a pause or with a lease renewal), else ``None``.
        redelivered: this run takes back one that was handed back (a :class:`Redeliver`,
            a warm shutdown, a resumed pause) rather than starting a new attempt.
        cancelled: set when the occurrence must stop (cancel or lost lease). Given as
            the event, or as what makes it on first use (a run that never looks makes none).
        logger: where job code should log; its lines are kept in the run's output.
        timeout_s: the job's timeout in seconds, or ``None`` for none.
        kill_grace_s: seconds a stopped run gets between SIGTERM (or ``cancelled``)
            and SIGKILL (or the pool process exiting).
        secrets: values that must never appear in the run's output or errors; an
            adapter adds the secret values it hands to the job.
        adjudication: the last verdict on an earlier run of this occurrence whose
            outcome was unknown (``decision``, ``authority``, ``evidence``), else
            ``None``; after a ``not_applied`` verdict this run is the one the verdict
            allowed. Read from the kernel on first use.
    """

    def __init__(
        self,
        occurrence: Occurrence,
        *,
        resumed: Any | None,
        redelivered: bool = False,
        cancelled: threading.Event | Callable[[], threading.Event],
        on_safe_point: Callable[[str, Any], None],
        logger: logging.Logger | logging.LoggerAdapter[Any],
        timeout_s: float | None,
        kill_grace_s: float = 2.0,
        effects_deadline: Callable[[], float | None] = lambda: None,
        on_output: Callable[[str, str], None] = lambda stream, text: None,
        adjudication: Callable[[], Adjudication | None] = lambda: None,
    ) -> None:
        self.occurrence = occurrence
        self.resumed = resumed
        self.redelivered = redelivered
        self._cancelled = cancelled
        self.logger = logger
        self.timeout_s = timeout_s
        self.kill_grace_s = kill_grace_s
        self.secrets: set[str] = set()
        self._on_safe_point = on_safe_point
        self._effects_deadline = effects_deadline
        self._on_output = on_output
        self._read_adjudication = adjudication
        self._adjudication: tuple[Adjudication | None] | None = None

    @property
    def cancelled(self) -> threading.Event:
        cancelled = self._cancelled
        if not isinstance(cancelled, threading.Event):
            cancelled = self._cancelled = cancelled()
        return cancelled

    @property
    def adjudication(self) -> Adjudication | None:
        if self._adjudication is None:
            self._adjudication = (self._read_adjudication(),)
        return self._adjudication[0]

    def effects_deadline(self) -> float | None:
        """The ``time.monotonic()`` by which every effect of this run must have stopped.

        It moves forward with each lease renewal; ``None`` means no lease bounds the
        run. See :mod:`kernel.spec.jobspec` for the rule.
        """
        return self._effects_deadline()

    def write_output(self, stream: str, text: str) -> None:
        """Add ``text`` to the run's captured output under ``stream`` (``stdout``, ...)."""
        self._on_output(stream, text)

    def checkpoint(self, data: Any) -> None:
        """Offer a safe point carrying ``data`` (JSON-serialisable, at most 64 KiB).

        ``data`` is the run's progress: the newest is stored with the next lease renewal,
        so a later run of the occurrence (its worker killed, a retry) starts with it in
        ``resumed``. ``None`` carries no progress. Returns normally when nothing is
        pending. A cancelled occurrence stops here too, so job code that checkpoints
        needs no separate cancel check.

        Raises:
            Cancelled: ``cancelled`` is set.
            HandBack: the runtime stored ``data`` and took the occurrence back.
            InvalidArgument: ``data`` exceeds 64 KiB as canonical JSON.
        """
        if self.cancelled.is_set():
            raise Cancelled(f"occurrence {self.occurrence.id} was cancelled")
        self._on_safe_point(SafePoint.ADAPTER_CHECKPOINT.value, data)


@dataclass
class AdjudicationContext:
    """What an adapter sees when asked about an uncertain run (:meth:`BaseAdapter.adjudicate`).

    Attributes:
        occurrence: the occurrence in ``needs_adjudication``; ``fence`` names the run
            whose outcome is unknown.
        logger: where the adapter logs what it found.
        timeout_s: seconds the adapter has to answer; a later answer is discarded.
        secrets: values that must never appear in logs or evidence; the adapter adds
            the secret values it uses (they are masked in the recorded reason; evidence
            is recorded as given, so it must hold none).
    """

    occurrence: Occurrence
    logger: logging.Logger | logging.LoggerAdapter[Any]
    timeout_s: float
    secrets: set[str]


@runtime_checkable
class Adapter(Protocol):
    """What the runtime calls; see :class:`BaseAdapter` for the defaults."""

    kind: str
    runtime_control: RuntimeControl

    def execute(self, ctx: ExecutionContext) -> Any:
        """Run the occurrence; return a JSON-serialisable result or ``None``."""
        ...

    def resume(self, ctx: ExecutionContext) -> Any:
        """Continue a paused occurrence; ``ctx.resumed`` holds its checkpoint."""
        ...

    def classify_error(self, exc: BaseException) -> ErrorClass:
        """Say whether ``exc`` raised by execute/resume is retryable, and its code."""
        ...

    # Optional (not part of the protocol's check): ``adjudicate(ctx) -> Verdict | None``,
    # see BaseAdapter.adjudicate. An adapter without it cannot tell.


class BaseAdapter(ABC):
    """Defaults for the :class:`Adapter` protocol.

    Subclasses set ``kind`` (and ``runtime_control`` when they can be paused)
    and implement ``execute``. The registry calls every adapter factory as
    ``factory(app=app)``, hence the ``app`` argument.
    """

    kind: str
    runtime_control: RuntimeControl = NO_RUNTIME_CONTROL

    def __init__(self, app: Any = None) -> None:
        self.app = app

    @abstractmethod
    def execute(self, ctx: ExecutionContext) -> Any:
        """Run the occurrence; return a JSON-serialisable result or ``None``."""

    def resume(self, ctx: ExecutionContext) -> Any:
        """Run again from the start; job code reads ``ctx.resumed`` to skip done work."""
        return self.execute(ctx)

    def adjudicate(self, ctx: AdjudicationContext) -> Verdict | None:
        """Say whether the uncertain run of ``ctx.occurrence`` took effect, if the adapter
        can find out: ``Verdict(Decision.APPLIED | Decision.NOT_APPLIED, evidence)``, or
        ``None`` ("cannot tell": an operator decides). Called by a worker for an
        at-most-once occurrence whose run's outcome is unknown (its failure classified
        ``Effect.UNKNOWN``, or its lease expired mid-run); must not repeat the effect.
        The default cannot tell."""
        return None

    def classify_error(self, exc: BaseException) -> ErrorClass:
        """Classify ``exc``: unknown failures are retryable ``ADAPTER_ERROR``.

        An exception the job's code raised is its own answer (effect not applied); a
        timeout (the run's, or one the code met) leaves the effect unknown. The message is
        whole: the runtime masks secrets in it, then cuts it (:func:`bound_message`).
        """
        if isinstance(exc, AdapterError):
            return ErrorClass(
                exc.retryable, exc.code, exc.message, exc.effect, exc.retry_in, exc.retry_with
            )
        if isinstance(exc, Cancelled):
            return ErrorClass(False, "CANCELLED", str(exc) or "cancelled")
        if isinstance(exc, TimeoutError):
            return ErrorClass(True, "TIMEOUT", str(exc) or "timed out", Effect.UNKNOWN)
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return ErrorClass(True, "ADAPTER_ERROR", text)


def read_payload(payload: Mapping[str, Any], model: type[P]) -> P:
    """``payload`` as its kind's model (:mod:`kernel.spec.payloads`), by the rules it was
    defined under.

    Payloads are validated when the job is defined; this is the adapter's last
    line, so a bad snapshot dead-letters cleanly instead of retrying forever.

    Raises:
        AdapterError: non-retryable ``INVALID_PAYLOAD`` naming the field.
    """
    try:
        return model.read(payload)
    except InvalidArgument as exc:
        raise AdapterError("INVALID_PAYLOAD", exc.message, retryable=False) from None


def tail_text(text: str, limit: int) -> str:
    """The last ``limit`` characters of ``text``, marked when cut."""
    return text if len(text) <= limit else "..." + text[-limit:]


def bound_message(message: str) -> str:
    """``message`` cut to the length a failure's message is stored with, marked when cut.
    Secrets are masked in it first: a cut through one would leave a piece no scrub finds."""
    return message if len(message) <= _MESSAGE_LIMIT else message[: _MESSAGE_LIMIT - 3] + "..."
