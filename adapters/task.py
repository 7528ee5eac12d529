"""The ``task`` adapter: run a registered Celery task's body in this process.

This is how an existing ``beat_schedule`` entry moves onto the kernel
unchanged: the task keeps its signature and is called with the occurrence's
args/kwargs (values Celery's JSON tags decoded by kombu, as Celery's worker decodes its
message). Only ``app.tasks`` and task attributes are used, so this module never imports
Celery.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from kombu.utils.json import object_hook

from adapters.base import (
    CHECKPOINT_V1,
    AdapterError,
    BaseAdapter,
    Cancelled,
    ExecutionContext,
    Replaced,
    read_payload,
)
from kernel import SafePoint, TaskPayload

__all__ = [
    "TaskAdapter", "TaskCall", "CHECKPOINTS_OPTION", "arguments", "retries_on", "running_context",
]  # fmt: skip

#: The task option (``@app.task(kernel_checkpoints=True)``) by which a task says its
#: body calls ``current_run.checkpoint()``, so it can be paused while it runs.
CHECKPOINTS_OPTION = "kernel_checkpoints"
_BEFORE_EXECUTE_ONLY = (SafePoint.BEFORE_EXECUTE.value,)

_running: ContextVar[ExecutionContext | None] = ContextVar("kernel_task_run", default=None)


def running_context() -> ExecutionContext | None:
    """The context of the task body running in this thread, if the kernel claimed it."""
    return _running.get()


#: ``call(task, ctx, run)``: runs the task body (``run()``) as the task ``task`` would run.
TaskCall = Callable[[Any, ExecutionContext, Callable[[], Any]], Any]


def _call_body(task: Any, ctx: ExecutionContext, run: Callable[[], Any]) -> Any:
    return run()


def _autoretry_for(task: Any) -> tuple[type[BaseException], ...]:
    return tuple(getattr(task, "autoretry_for", ()) or ())


def retries_on(task: Any, exc: BaseException) -> bool:
    """Whether ``task`` retries on ``exc`` by its ``autoretry_for``/``dont_autoretry_for``."""
    final = tuple(getattr(task, "dont_autoretry_for", ()) or ())
    return isinstance(exc, _autoretry_for(task)) and not isinstance(exc, final)


def arguments(args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """The body's (args, kwargs): a payload's, with the values Celery's JSON tags (bytes,
    datetime, Decimal, UUID: ``{"__type__": ..., "__value__": ...}``, how a routed call
    stores them) made what Celery's message would give the body."""
    return _untagged(list(args)), _untagged(dict(kwargs))


def _untagged(value: Any) -> Any:
    if isinstance(value, list):
        return [_untagged(item) for item in value]
    if isinstance(value, dict):
        return object_hook({name: _untagged(item) for name, item in value.items()})
    return value


class TaskAdapter(BaseAdapter):
    """Calls the body of ``app.tasks[payload["task"]]`` with the payload's args/kwargs.

    The body runs here rather than through ``apply_async`` because the kernel
    has already claimed the occurrence; a second broker round trip would run it
    outside the lease. Celery's automatic retry is bypassed (the kernel owns the
    retry): an exception the task lists in ``autoretry_for`` is a retryable
    failure, any other one is final, as it would be under Celery; ``self.retry()``
    becomes a kernel retry where the worker sets :attr:`call` (its ``Retry``).

    A body reaches the ``adapter_checkpoint`` safe point through
    ``celery_app.current_run``; only a task declaring ``kernel_checkpoints=True``
    offers it to a pause, any other's only safe point is ``before_execute``.
    """

    kind = "task"
    runtime_control = CHECKPOINT_V1
    #: How the body is called; the worker sets Celery's way (``celery_app.task_call``).
    call: TaskCall = staticmethod(_call_body)

    def safe_points_for(self, payload: Mapping[str, Any]) -> tuple[str, ...]:
        """The safe points the payload's task declares (``before_execute`` unless it opts in)."""
        task = self.app.tasks.get(payload.get("task")) if self.app is not None else None
        if task is not None and getattr(task, CHECKPOINTS_OPTION, False):
            return self.runtime_control.safe_points
        return _BEFORE_EXECUTE_ONLY

    def execute(self, ctx: ExecutionContext) -> Any:
        payload = read_payload(ctx.occurrence.payload, TaskPayload)
        name, (args, kwargs) = payload.task, arguments(payload.args, payload.kwargs)
        task = self._task(name)
        # autoretry_for wraps `run` to call Celery's retry; `_orig_run` is the body.
        body = getattr(task, "_orig_run", task.run)
        with _running_as(ctx):
            try:
                return self.call(task, ctx, lambda: body(*args, **kwargs))
            except (Cancelled, AdapterError, Replaced):
                raise
            except Exception as exc:
                if retries_on(task, exc):
                    raise
                listed = " (not in the task's autoretry_for)" if _autoretry_for(task) else ""
                raise AdapterError(
                    "TASK_FAILED",
                    f"{type(exc).__name__}: {exc}{listed}",
                    retryable=False,
                    effect=self.classify_error(exc).effect,
                ) from exc

    def _task(self, name: str) -> Any:
        if self.app is None:
            raise AdapterError(
                "TASK_NOT_REGISTERED",
                f"task {name!r} cannot run: the task adapter was loaded without a Celery app",
                retryable=False,
            )
        try:
            return self.app.tasks[name]
        except KeyError:
            raise AdapterError(
                "TASK_NOT_REGISTERED",
                f"task {name!r} is not registered with Celery app {self.app.main!r}",
                retryable=False,
            ) from None


@contextmanager
def _running_as(ctx: ExecutionContext) -> Iterator[None]:
    token = _running.set(ctx)
    try:
        yield
    finally:
        _running.reset(token)
