"""KernelScheduler, the Celery Beat scheduler: Celery's hooks, the tick, stop and outage.

The tick's steps live by noun beside it: ``firings`` (materialise, pump, adapter
asks) and ``upkeep`` (heartbeat, expiry, approval timeouts, watchdog, retention);
the package's docstring says how Beat behaves.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
import uuid
from types import FrameType
from typing import Any

from celery.beat import Scheduler

from beat_schedule.jobfiles import JobFile
from beat_schedule.sync import read_beat_schedule, sync_beat_schedule
from celery_app.beat.firings import FiringSteps
from celery_app.beat.upkeep import UpkeepSteps
from celery_app.broker import use_embedded_broker
from celery_app.config import check_broker_url, ensure_broker_folders, open_kernel, refuse_start
from celery_app.definitions import read_app_job_file
from celery_app.scope import Scope
from celery_app.settings import CONFIG_EXIT, INTERRUPTED_EXIT, KernelSettings
from kernel import Kernel, KernelError, StorageUnavailable, masked_url

__all__ = ["KernelScheduler"]

log = logging.getLogger("celery_kernel.beat")


class KernelScheduler(FiringSteps, UpkeepSteps, Scheduler):
    """Celery Beat scheduler backed by the kernel (``beat_scheduler`` or ``-S kernel``)."""

    def __init__(self, app: Any, *args: Any, **kwargs: Any) -> None:
        self.kernel: Kernel | None = None
        self._ticking = False
        self._stop_code: int | None = None
        self._unavailable_since: float | None = None
        self.hint_options = {}
        self.unplannable = set()
        self.beat_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        try:  # before anything else: Celery builds a scheduler for its banner first
            self.settings = KernelSettings.from_app(app)
            use_embedded_broker(app)  # the URL in the banner and the pump's
            check_broker_url(app)
        except KernelError as exc:
            refuse_start("beat", exc)
        super().__init__(app, *args, **kwargs)
        self.max_interval = self.settings.beat_interval

    # -- Celery Scheduler hooks ---------------------------------------------------

    def setup_schedule(self) -> None:
        """Open the kernel and apply ``beat_schedule`` and ``KERNEL_JOBS_FILE`` definitions."""
        if _is_celery_beat_handler(signal.getsignal(signal.SIGTERM)):
            # Replaced here, not at beat_init: Celery's handler, run while this very
            # scheduler is being built, would build a second one to close it.
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, self._on_stop_signal)
        # As the worker does: the modules in `imports`/`include`, so each entry's task,
        # with its time limits and retry settings, and each adapter is registered here.
        self.app.loader.import_default_modules()
        try:
            # An invalid or missing KERNEL_JOBS_FILE stops Beat with `jobs apply`'s words
            # (exit 2, a setting), before anything is created.
            job_file = self._read_jobs_file()
        except KernelError as exc:
            refuse_start("beat", exc, exit_code=CONFIG_EXIT)
        try:
            ensure_broker_folders(self.app)  # the pump publishes from this process
            self.kernel = open_kernel(self.app)
            beat_schedule = read_beat_schedule(self.app.conf, self.app.tasks, app=self.app)
            sync_beat_schedule(self.kernel, beat_schedule, source=self.settings.beat_source)
        except KernelError as exc:
            refuse_start("beat", exc)
        self.hint_options = beat_schedule.hints
        if job_file is not None:
            self._apply_jobs_file(self.kernel, job_file)
        self.data: dict[str, Any] = {}

    def _read_jobs_file(self) -> JobFile | None:
        jobs_file = self.settings.jobs_file
        if jobs_file is None:
            return None
        job_file = read_app_job_file(self.app, jobs_file)
        Scope.of(self.settings).check(job_file.jobs)
        return job_file

    def _apply_jobs_file(self, kernel: Kernel, job_file: JobFile) -> None:
        try:
            applied = kernel.apply_jobs(
                [spec.to_dict() for spec in job_file.jobs],
                pools=job_file.pools,
                shared_budgets=job_file.budgets,
            )
        except KernelError as exc:  # refused whole; the jobs already defined keep running
            log.error("job file not applied: %s", exc, extra={"action": "jobs_file_refused"})
        else:
            log.info(
                "%s: %s",
                self.settings.jobs_file,
                ", ".join(f"{job.id} {change}" for job, change in applied),
                extra={"action": "jobs_file_applied"},
            )

    @property
    def schedule(self) -> dict[str, Any]:
        return self.data

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """One pass: heartbeat, lease expiry, due firings, dispatch pump, retention, watchdog.
        Never raises.

        While the kernel is unavailable the rest of a tick is skipped (each step would
        only fail the same way); a stop requested meanwhile takes effect at its end.
        """
        kernel = self.kernel
        assert kernel is not None, "setup_schedule opens the kernel"
        self._ticking = True
        try:
            steps = (
                self._heartbeat,
                self._expire,
                self._time_out_approvals,
                self._materialise,
                self._fan_in,
                self._pump,
                self._ask_adapters,
                self._retain,
                self._watch,
                self._rehint_notifications,
            )
            for step in steps:
                try:
                    step(kernel)
                except StorageUnavailable as exc:
                    self._unavailable(exc)
                    break
                except Exception:  # Beat must outlive one bad job
                    log.exception(
                        "beat step %s failed; the tick goes on",
                        step.__name__,
                        extra={"action": "tick_step_failed", "beat_id": self.beat_id},
                    )
            else:
                self._available()
        finally:
            self._ticking = False
        if self._stop_code is not None:
            raise SystemExit(self._stop_code)
        return float(self.max_interval)

    def _on_stop_signal(self, signum: int, frame: FrameType | None) -> None:
        """SIGTERM or SIGINT: stop now between ticks, else once the tick under way ends."""
        self._stop_code = INTERRUPTED_EXIT if signum == signal.SIGINT else 0
        if not self._ticking:
            raise SystemExit(self._stop_code)

    def _unavailable(self, exc: StorageUnavailable) -> None:
        log.debug("tick skipped: %s", exc, exc_info=True, extra={"action": "tick_skipped"})
        if self._unavailable_since is None:
            self._unavailable_since = time.monotonic()
            log.warning(
                "kernel unavailable, Beat retries every %ss: %s",
                f"{self.max_interval:g}",
                exc.message,
                extra={"action": "kernel_unavailable", "beat_id": self.beat_id},
            )

    def _available(self) -> None:
        if self._unavailable_since is not None:
            outage = time.monotonic() - self._unavailable_since
            self._unavailable_since = None
            log.info(
                "kernel available again after %.1fs",
                outage,
                extra={"action": "kernel_available", "beat_id": self.beat_id, "outage_s": outage},
            )

    def close(self) -> None:
        """Deregister and close the kernel, unless a tick is under way in this very thread.

        Celery Beat's own SIGTERM handler (replaced once ``celery beat`` runs this
        scheduler) calls ``close()`` from inside the signal handler, which can
        interrupt a tick in the middle of a kernel transaction: closing the kernel there
        would wait forever for the connection that tick holds. Beat calls ``close()``
        again once the tick unwound. After Ctrl-C this ends Beat with exit 130.
        """
        if self._ticking:
            return
        if self.kernel is not None:
            try:
                self.kernel.deregister_beat(self.beat_id)
            except KernelError as exc:
                log.warning("beat not deregistered: %s", exc, extra={"action": "deregister_failed"})
            self.kernel.close()
            self.kernel = None
        super().close()
        if self._stop_code == INTERRUPTED_EXIT:
            raise SystemExit(INTERRUPTED_EXIT)

    @property
    def info(self) -> str:
        return f"    . kernel -> {masked_url(self.settings.database_url)} (beat id {self.beat_id})"


def _is_celery_beat_handler(handler: Any) -> bool:
    """Whether ``handler`` is the one ``celery beat`` installs (so this process is Beat)."""
    return "install_sync_handler" in getattr(handler, "__qualname__", "")
