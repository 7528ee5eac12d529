"""The worker's request for a kernel hint: task events that name the job on every event,
and a Celery revoke of the hint's id carried to the kernel.

Beat publishes each hint under its job's name (Celery's ``shadow``). Celery puts that
name only on ``task-received``: a monitor that subscribed later (Flower started while
the run was under way, which is also when Flower turns task events on) learnt the run
from its ``task-succeeded`` or ``task-failed`` alone and showed the name ``null``.
Events are sent only when they are on, so this costs nothing otherwise.

A hint of one run has that run's task id (a routed call's own), so Celery's revoke of
that id (``AsyncResult.revoke()``) reaches it: the worker discards the message, as it
discards a revoked task's (or, with ``terminate=True``, kills the process running it),
and the run is cancelled in the kernel. Discarded alone, the run would stay queued and
Beat's pump would hint it again under the same id, until a worker that never heard of
the revoke ran it; killed alone, its lease's expiry would hand it to another worker.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.worker import state as worker_state
from celery.worker.request import Request

from celery_app.worker_process import process_resources
from kernel import KernelError

__all__ = ["NamedEventsRequest"]

log = logging.getLogger("celery_kernel.worker")


class NamedEventsRequest(Request):
    """The worker's request for a kernel hint (see the module docstring)."""

    def send_event(self, type: str, **fields: Any) -> None:  # noqa: A002 - Celery's name
        fields.setdefault("name", self.name)
        super().send_event(type, **fields)

    def revoked(self) -> bool:
        """Celery's check before it runs the message; a hint revoked by its id also
        cancels its runs in the kernel (hints carry no ``expires`` of their own)."""
        if not super().revoked():
            return False
        if self.id in worker_state.revoked:
            _cancel_revoked(self.task.app, self.id, self.args)
        return True

    def terminate(self, pool: Any, signal: Any = None) -> None:
        """``revoke(terminate=True)`` of the hint: its runs are cancelled in the kernel
        before Celery signals the process running them, so the lease's expiry ends them
        cancelled instead of another worker reclaiming them."""
        if self.id in worker_state.revoked:
            _cancel_revoked(self.task.app, self.id, self.args)
        super().terminate(pool, signal)


def _cancel_revoked(app: Any, task_id: str, occurrence_ids: Any) -> None:
    """Cancel the runs of a revoked hint, once per revoke and run (the request id); a run
    that has ended or is cancelled already stays as it is."""
    kernel = process_resources(app).kernel
    for occurrence_id in map(int, occurrence_ids or ()):
        try:
            kernel.cancel(
                occurrence_id,
                request_id=f"revoke:{occurrence_id}:{task_id}"[:128],
                operator="celery revoke",
            )
        except KernelError as exc:  # ended already, or the database is away: logged, kept
            log.warning(
                "occurrence %s: Celery revoked task %s, not cancelled in the kernel: %s",
                occurrence_id,
                task_id,
                exc,
                extra={"action": "revoke_not_cancelled", "occurrence_id": occurrence_id},
            )
            continue
        log.info(
            "occurrence %s cancelled: Celery revoked task %s",
            occurrence_id,
            task_id,
            extra={"action": "revoke_cancelled", "occurrence_id": occurrence_id},
        )
