"""``current_run``: a Celery task body's view of the kernel occurrence it runs as.

A task that runs long marks itself ``kernel_checkpoints=True`` and calls
``current_run.checkpoint(progress)`` at points where it may stop: there a pause
is acknowledged, a warm shutdown hands the run back, and a cancel stops it.
The progress is stored with the run's next lease renewal, so the next run of the
occurrence (after a pause, a killed worker or a retry) finds it in ``current_run.resumed``.
Outside a kernel run (the task called directly, or through plain Celery) every
call is harmless: ``checkpoint`` returns, ``resumed`` is None, ``cancelled`` False.
"""

from __future__ import annotations

from typing import Any

from adapters.base import ExecutionContext
from adapters.task import running_context

__all__ = ["CurrentRun", "current_run"]


class CurrentRun:
    """The occurrence the calling task body runs as (see the module docstring)."""

    @property
    def _ctx(self) -> ExecutionContext | None:
        return running_context()

    @property
    def active(self) -> bool:
        """True inside a run the kernel claimed."""
        return self._ctx is not None

    @property
    def occurrence_id(self) -> int | None:
        ctx = self._ctx
        return None if ctx is None else ctx.occurrence.id

    @property
    def resumed(self) -> Any:
        """The data of the occurrence's newest checkpoint this run resumes from, else None."""
        ctx = self._ctx
        return None if ctx is None else ctx.resumed

    @property
    def cancelled(self) -> bool:
        """An operator cancelled the occurrence (or its lease was lost): stop soon."""
        ctx = self._ctx
        return ctx is not None and ctx.cancelled.is_set()

    def checkpoint(self, data: Any = None) -> None:
        """A safe point carrying ``data`` (JSON, at most 64 KiB) to resume from; stored
        with the next lease renewal (``None``: no progress to store).

        Returns when nothing is pending. Raises ``adapters.Cancelled`` when the
        occurrence was cancelled, and ``adapters.HandBack`` (a BaseException, so
        ``except Exception`` cannot swallow it) when the run pauses or is handed
        back: let both propagate.
        """
        ctx = self._ctx
        if ctx is not None:
            ctx.checkpoint(data)


current_run = CurrentRun()
