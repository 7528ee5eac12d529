"""The facade's part for job health: how each job is doing, and its notifications' delivery."""

from __future__ import annotations

from kernel.facade.base import FacadeBase, read, write
from kernel.jobs import health as job_health
from kernel.reports import JobHealth, Notification
from kernel.transaction.tx import Tx
from kernel.upkeep import notify

__all__ = ["HealthFacade"]


class HealthFacade(FacadeBase):
    @read
    def job_health(self, tx: Tx, job_id: str | None = None) -> dict[str, JobHealth]:
        """Last success, last failure, consecutive failures and next firing of every job
        (or only ``job_id``; an unknown id gives an empty answer), by job id; one query."""
        return job_health.job_health(tx, job_id)

    @write
    def claim_notification(self, tx: Tx, notification_id: int) -> Notification | None:
        """Start a try of a pending, due notification (its ``token`` names the try);
        None when another worker has it, it is done, or it is not due yet."""
        return notify.claim(tx, notification_id)

    @write
    def notification_delivered(self, tx: Tx, notification_id: int, *, token: str) -> None:
        """End the try ``token`` names: delivered.

        Raises:
            StateConflict: the try no longer holds the notification.
        """
        notify.delivered(tx, notification_id, token)

    @write
    def notification_failed(
        self, tx: Tx, notification: Notification, *, error: str, retryable: bool
    ) -> Notification:
        """End the try ``notification.token`` names: failed; pending again after the
        backoff while ``retryable`` and tries remain, else given up. Returns it as it is now.

        Raises:
            StateConflict: the try no longer holds the notification.
        """
        return notify.try_failed(tx, notification, error=error, retryable=retryable)

    @read
    def notification(self, tx: Tx, notification_id: int) -> Notification:
        """One notification. Raises NotFound when there is none."""
        return notify.get(tx, notification_id)

    @read
    def run_notifications(
        self, tx: Tx, occurrence_id: int, fence: int | None = None
    ) -> list[Notification]:
        """The pending notifications of the run (``occurrence_id``, ``fence``): those its
        settle recorded, for its worker to hint. Without ``fence``: of any run of it (a
        claim that found its run's lease expired settled it at the lost worker's fence)."""
        return notify.of_run(tx, occurrence_id, fence)

    @read
    def due_notifications(
        self, tx: Tx, limit: int = 100, *, overdue_for: float = 0.0
    ) -> list[Notification]:
        """Pending notifications whose next try has been due for ``overdue_for`` seconds
        at least, oldest first (at most ``limit``)."""
        return notify.due(tx, limit, int(overdue_for * 1000))
