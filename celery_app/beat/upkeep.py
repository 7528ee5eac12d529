"""Beat's upkeep steps: the passes of a tick that keep the kernel tidy, apart from firing.

Heartbeat (and forgetting long-silent Beats), lease expiry, approval timeouts, the
watchdog, retention and notifications whose hint was lost. Every Beat runs them;
forgetting Beats, the watchdog, retention and notification hints at most once per their
interval, timed on this Beat's monotonic clock.
"""

from __future__ import annotations

import logging
import socket
import time
from typing import Any

from celery_app import notify
from celery_app.settings import KernelSettings
from kernel import Kernel

__all__ = ["UpkeepSteps"]

log = logging.getLogger("celery_kernel.beat")

#: How often a Beat removes Beats silent for longer than ``kernel_beat_retention``.
_FORGET_EVERY_S = 60.0


class UpkeepSteps:
    """The tick's heartbeat, expiry, approval-timeout, fan-in, watchdog and retention steps
    (a part of KernelScheduler)."""

    app: Any
    settings: KernelSettings
    beat_id: str
    max_interval: float
    #: Monotonic times before which the forget, watchdog and retention passes wait.
    _next_forget = 0.0
    _next_watch = 0.0
    _next_retention = 0.0
    _next_notify = 0.0

    def _heartbeat(self, kernel: Kernel) -> None:
        kernel.record_beat(
            self.beat_id, host=socket.gethostname(), interval=float(self.max_interval)
        )
        if time.monotonic() >= self._next_forget:
            forgotten = kernel.forget_silent_beats(silent_for=self.settings.beat_retention)
            self._next_forget = time.monotonic() + _FORGET_EVERY_S
            if forgotten:
                log.info(
                    "forgot Beats silent for more than %gs: %s",
                    self.settings.beat_retention,
                    ", ".join(forgotten),
                    extra={"action": "beats_forgotten", "beat_id": self.beat_id},
                )

    def _expire(self, kernel: Kernel) -> None:
        settled = kernel.expire_leases()
        # Past their start deadline (expires), waiting runs are skipped even with no worker
        # to meet them.
        skipped = kernel.skip_expired()
        if any(settled.values()) or skipped:
            # Their notifications (and owed results) were recorded with them; no worker
            # hints those.
            notify.rehint_overdue(self.app, kernel, overdue_for=0.0)
        if skipped:
            log.info(
                "%d occurrence(s) skipped: expired before they started",
                skipped,
                extra={"action": "expired_skipped", "beat_id": self.beat_id},
            )

    def _fan_in(self, kernel: Kernel) -> None:
        """Fire (or record as skipped) the fan-in jobs whose parents all settled."""
        report = kernel.judge_fan_ins()
        if report.created or report.skipped:
            log.info(
                "fan-in: %d created, %d skipped",
                len(report.created),
                len(report.skipped),
                extra={"action": "fan_in_judged", "beat_id": self.beat_id},
            )

    def _time_out_approvals(self, kernel: Kernel) -> None:
        decided = kernel.apply_approval_timeouts()
        if any(decided.values()):
            log.info(
                "approval timeouts applied: %d approved, %d rejected",
                decided["approved"],
                decided["rejected"],
                extra={"action": "approval_timeouts", "beat_id": self.beat_id, **decided},
            )

    def _watch(self, kernel: Kernel) -> None:
        """Every minute: correct pool counters that drifted, record overdue firings and
        runs past their timeout as events."""
        if time.monotonic() < self._next_watch:
            return
        self._next_watch = time.monotonic() + _FORGET_EVERY_S
        for fixed in kernel.reconcile_pools():
            log.warning(
                "pool %s counted %d running, its runs hold %d slot(s): corrected",
                fixed["pool"],
                fixed["was"],
                fixed["running"],
                extra={"action": "pool_reconciled", "beat_id": self.beat_id, **fixed},
            )
        found = kernel.record_watchdog(
            grace=self.settings.watchdog_grace, default_timeout=self.settings.default_timeout
        )
        if found["new_events"]:
            notify.rehint_overdue(self.app, kernel, overdue_for=0.0)
            log.warning(
                "watchdog: %d overdue firing(s), %d run(s) past their timeout, "
                "%d occurrence(s) stranded, %d occurrence(s) awaiting adjudication",
                found["overdue_firings"],
                len(found["overrunning"]),
                len(found["stranded"]),
                found["needs_adjudication"],
                extra={"action": "watchdog_findings", "beat_id": self.beat_id},
            )

    def _retain(self, kernel: Kernel) -> None:
        """One bounded retention pass every retention interval; the next tick goes on
        at once while a pass hit its bound (so a backlog drains in steps, not one
        long transaction)."""
        if time.monotonic() < self._next_retention:
            return
        done = kernel.apply_retention(self.settings.retention, limit=self.settings.retention_batch)
        self._next_retention = (
            0.0 if done["more"] else time.monotonic() + self.settings.retention_interval
        )
        if done["occurrences"] or done["jobs"]:
            log.info(
                "retention pruned %d occurrence(s), %d event(s); deleted job(s): %s%s",
                done["occurrences"],
                done["events"],
                ", ".join(done["jobs"]) or "none",
                " (more to do)" if done["more"] else "",
                extra={
                    "action": "retention_applied",
                    "beat_id": self.beat_id,
                    "occurrences": done["occurrences"],
                    "events": done["events"],
                    "jobs": done["jobs"],
                    "more": done["more"],
                },
            )

    def _rehint_notifications(self, kernel: Kernel) -> None:
        """Every minute: hint again the failure notifications whose hint was lost."""
        if time.monotonic() < self._next_notify:
            return
        self._next_notify = time.monotonic() + _FORGET_EVERY_S
        notify.rehint_overdue(self.app, kernel)
