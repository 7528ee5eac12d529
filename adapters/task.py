"""The ``task`` adapter: run a registered Celery task's body in this process.

This is how an existing ``beat_schedule`` entry moves onto the kernel
unchanged: the task keeps its signature and is called with the occurrence's
args/kwargs. Only ``app.tasks`` is used, so this module never imports Celery.
"""

from __future__ import annotations

from typing import Any

from adapters.base import CHECKPOINT_V1, AdapterError, BaseAdapter, ExecutionContext, payload_value

__all__ = ["TaskAdapter"]


class TaskAdapter(BaseAdapter):
    """Calls ``app.tasks[payload["task"]].run(*args, **kwargs)``.

    The body runs here rather than through ``apply_async`` because the kernel
    has already claimed the occurrence; a second broker round trip would run it
    outside the lease. A task body cannot call ``ctx.checkpoint``, so its only
    safe point is ``before_execute`` (a pause there resumes from the start).
    """

    kind = "task"
    runtime_control = CHECKPOINT_V1

    def execute(self, ctx: ExecutionContext) -> Any:
        payload = ctx.occurrence.payload
        name = payload_value(payload, "task", str)
        args = payload_value(payload, "args", list, [])
        kwargs = payload_value(payload, "kwargs", dict, {})
        if self.app is None:
            raise AdapterError(
                "TASK_NOT_REGISTERED",
                f"task {name!r} cannot run: the task adapter was loaded without a Celery app",
                retryable=False,
            )
        try:
            task = self.app.tasks[name]
        except KeyError:
            raise AdapterError(
                "TASK_NOT_REGISTERED",
                f"task {name!r} is not registered with Celery app {self.app.main!r}",
                retryable=False,
            ) from None
        return task.run(*args, **kwargs)
