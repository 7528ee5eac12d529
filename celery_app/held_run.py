"""One claimed run while it executes: its lease, its deadlines and its safe points, and
the one thread per process that renews every run's lease. A run reads its worker's warm
shutdown at its safe points (:mod:`celery_app.warm_shutdown`)."""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from adapters.base import Adapter, HandBack
from celery_app.kill_timer import KillTimer
from celery_app.run_output import RunLogger, RunOutput
from celery_app.warm_shutdown import shutting_down
from kernel import (
    SELF_FENCE_MARGIN_S,
    Claim,
    Kernel,
    KernelError,
    LeaseLost,
    PendingPause,
    SafePoint,
    checkpoint_copy,
    renew_interval,
)

__all__ = [
    "SELF_FENCE_EXIT",
    "HeldRun",
    "LeaseKeeper",
    "claim_pause",
    "new_owner",
]

log = logging.getLogger("celery_kernel.runtime")

# How often the keeper renews due leases and checks every run's deadlines.
_POLL_S = 0.25
#: Exit status of a pool process that ended itself because a run would not stop.
SELF_FENCE_EXIT = 70
#: The kill timer fires this long after a run's effects deadline: the keeper's own exit
#: (logged, status 70) comes first whenever the keeper can run, and the process is
#: still gone half the margin before the lease could expire.
_KILL_AFTER_DEADLINE_S = SELF_FENCE_MARGIN_S / 2


def new_owner() -> str:
    """A lease owner's name: this host and process, and a token of its own (48 random
    bits, as many as the 12 hex digits of a uuid4 it was cut from)."""
    # Per process, not per run: the host's name and a UUID object cost 8 µs a run.
    return f"{_owner_prefix(os.getpid())}{os.urandom(6).hex()}"


@functools.cache
def _owner_prefix(pid: int) -> str:
    return f"{socket.gethostname()}:{pid}:"


#: Held while a run's ``ctx.cancelled`` is made or its cancel flag set (both brief).
_CANCEL_EVENTS = threading.Lock()


class _FencedEvent(threading.Event):
    """``ctx.cancelled``: set on cancel or lost lease, and also once the run's self-fencing
    moment has passed, read when asked. A worker frozen (SIGSTOP, a stalled VM) past its
    lease wakes with its job thread and its lease keeper racing; the job must see that its
    time is up before its next effect, not after the keeper's next turn."""

    def __init__(self, fence_at: Callable[[], float]) -> None:
        super().__init__()
        self._fence_at = fence_at

    def is_set(self) -> bool:
        return super().is_set() or time.monotonic() >= self._fence_at()


class HeldRun:
    """State shared by the executing thread and the lease keeper of one claim.

    The self-fencing rule (see :mod:`kernel.spec.jobspec`): effects must be gone by
    :meth:`effects_deadline`, ``SELF_FENCE_MARGIN_S`` before the lease could expire
    as measured from the start of the last renewal that succeeded. ``kill_grace``
    before it the run is cancelled; at it, a run still executing ends its process.
    """

    def __init__(
        self,
        kernel: Kernel,
        claim: Claim,
        adapter: Adapter,
        main_pid: int,
        claimed_at: float,
        timeout: tuple[float | None, str] = (None, "timeout"),
    ) -> None:
        self.kernel = kernel
        self.claim = claim
        self.adapter = adapter
        self.main_pid = main_pid
        # ctx.cancelled, made on the job's first look (cancel_event): most runs never look.
        self._cancel_event: _FencedEvent | None = None
        self._cancel_requested = False
        # Set once by the run's end (LeaseKeeper.remove), read by the keeper's thread: a flag
        # under the GIL, not an Event (nothing waits on it; an Event cost 3-6 µs a run).
        self.finished = False
        # Held while the keeper renews: the run's end waits on it for a renewal in flight.
        self.renewing = threading.Lock()
        self.lease_lost = False
        self.self_fenced = False
        self.timed_out = False
        self.pause: PendingPause | None = claim_pause(claim)
        # The newest checkpoint the run gave since the last renewal, boxed (its data may be
        # falsy) and copied (job code may change its object after the call). The next
        # renewal stores it (one commit per renewal, not per call); None: nothing new.
        self.progress: tuple[Any] | None = None
        occurrence = claim.occurrence
        definition = occurrence.definition
        self.lease_s = float(definition["lease"])
        self.kill_grace_s = float(definition.get("kill_grace", 2.0))
        # (seconds, the setting they come from): the job's timeout or the deployment's default.
        self.timeout_s, self.timeout_from = timeout
        self.started_at = claimed_at
        self.renewed_at = claimed_at
        self.hard_stop_at: float | None = None
        self.renew_interval = renew_interval(self.lease_s)
        self.next_renew = time.monotonic() + self.renew_interval
        self.log = RunLogger(
            log, {"occurrence_id": occurrence.id, "job_id": occurrence.job_id, "fence": claim.fence}
        )
        self.output = RunOutput(kernel, claim, definition.get("output", {}))
        self.log.output = self.output

    def effects_deadline(self) -> float:
        return self.renewed_at + self.lease_s - SELF_FENCE_MARGIN_S

    def fence_at(self) -> float:
        """When the run must stop its effects: ``kill_grace`` before the effects deadline."""
        return self.effects_deadline() - self.kill_grace_s

    def cancel_event(self) -> threading.Event:
        """``ctx.cancelled``: made on first use, set at once when the run was already told
        to stop (the keeper sets it, if made, in :meth:`_cancel`; the flag and the event are
        read and made under one process-wide lock, so neither side misses the other)."""
        event = self._cancel_event
        if event is None:
            with _CANCEL_EVENTS:
                event = self._cancel_event
                if event is None:
                    event = self._cancel_event = _FencedEvent(self.fence_at)
                    if self._cancel_requested:
                        event.set()
        return event

    @property
    def cancel_seen(self) -> bool:
        """What ``ctx.cancelled.is_set()`` answers (set by the keeper, by job code itself once
        made, or its self-fencing moment passed), without making the event."""
        event = self._cancel_event
        if self._cancel_requested:
            return True
        return event.is_set() if event is not None else time.monotonic() >= self.fence_at()

    def _cancel(self) -> None:
        with _CANCEL_EVENTS:
            self._cancel_requested = True
            event = self._cancel_event
        if event is not None:
            event.set()

    @property
    def fenced(self) -> bool:
        """The run may no longer act or settle: its lease is lost or its time is up."""
        return self.lease_lost or self.self_fenced or time.monotonic() >= self.fence_at()

    # -- lease keeper thread --------------------------------------------------

    def renew_if_due(self) -> None:
        """Renew once ``renew_interval`` has passed since the claim or the last renewal."""
        with self.renewing:
            if self.finished or self.lease_lost or time.monotonic() < self.next_renew:
                return
            started = time.monotonic()
            self.next_renew = started + self.renew_interval
            progress = self.progress
            try:
                answer = self.kernel.renew(
                    self.claim.occurrence.id,
                    owner=self.claim.owner,
                    fence=self.claim.fence,
                    lease=self.lease_s,
                    checkpoint=None if progress is None else progress[0],
                )
            except LeaseLost as exc:
                if self.finished:
                    return  # the run ended (settled, handed back, fenced off) meanwhile
                # The message carries the code (LEASE_LOST) and the new fence: operators grep it.
                self.log.warning(
                    "lease lost; the run is stopped and will not settle: %s",
                    exc,
                    extra={"action": "lease_lost"},
                )
                self.lease_lost = True
                self._stop_effects()
                return
            except KernelError as exc:  # storage trouble: keep trying until the lease is gone
                self.log.warning("lease renewal failed: %s", exc, extra={"action": "renew_failed"})
                return
            if not self.self_fenced:
                self.renewed_at = started
            if self.progress is progress:  # else the run gave a newer one meanwhile
                self.progress = None
            self.pause = answer.pause
            if answer.cancel_requested:
                self._cancel()
            self.output.flush()

    def enforce_deadlines(self) -> None:
        """Stop the run at its self-fencing or timeout deadline; exit if it will not stop."""
        if self.finished:
            return
        now = time.monotonic()
        if not self.self_fenced and not self.lease_lost:
            if now >= self.fence_at():
                self.log.warning(
                    "no lease renewal for %.1fs: stopping the run's effects before the lease "
                    "can expire (SELF_FENCED)",
                    now - self.renewed_at,
                    extra={"action": "self_fenced"},
                )
                self.self_fenced = True
                self._stop_effects()
            elif (
                self.timeout_s is not None
                and not self.timed_out
                and now >= self.started_at + self.timeout_s
            ):
                self.timed_out = True
                self._cancel()
                # An adapter that enforces its own timeout stops within the grace; slack for it.
                self.hard_stop_at = now + self.kill_grace_s + SELF_FENCE_MARGIN_S
        if self.hard_stop_at is not None and now >= self.hard_stop_at:
            self.log.critical(
                "the run did not stop within kill_grace %ss; this pool process exits so that "
                "its effects end (Celery starts a new one)",
                self.kill_grace_s,
                extra={"action": "self_fence_exit"},
            )
            logging.shutdown()
            os._exit(SELF_FENCE_EXIT)

    def _stop_effects(self) -> None:
        self._cancel()
        self.hard_stop_at = min(
            time.monotonic() + self.kill_grace_s, self.effects_deadline(), self.hard_stop_at or 1e18
        )

    # -- safe points ------------------------------------------------------------

    def shutting_down(self) -> bool:
        return shutting_down(self.main_pid)

    def on_safe_point(self, safe_point: str, data: Any) -> None:
        """Keep the data the run gave for the next renewal to store; hand the occurrence
        back here if a pause or a warm shutdown is pending."""
        if self.lease_lost:
            raise HandBack()
        if safe_point not in self.adapter.runtime_control.safe_points:
            return
        if safe_point == SafePoint.ADAPTER_CHECKPOINT and data is not None:
            # Copied now: a checkpoint over the bound is refused to the job at its call.
            self.progress = (checkpoint_copy(data),)
        occurrence_id, owner, fence = self.claim.occurrence.id, self.claim.owner, self.claim.fence
        pending = self.pause
        pause = pending if pending is not None and safe_point in pending.safe_points else None
        shutting_down = pause is None and self.shutting_down()
        if pause is not None or shutting_down:
            self.output.flush(final=True)  # a hand-back releases the lease: store it first
        if pause is not None:
            self.kernel.ack_pause(
                occurrence_id,
                owner=owner,
                fence=fence,
                request_id=pause.request_id,
                expected_revision=pause.revision,
                safe_point=safe_point,
                checkpoint=data,
            )
            self.log.info("paused at %s", safe_point, extra={"action": "paused"})
            raise HandBack()
        if shutting_down:
            self.kernel.hand_back(
                occurrence_id, owner=owner, fence=fence, safe_point=safe_point, checkpoint=data
            )
            self.log.info(
                "handed back at %s for a warm shutdown", safe_point, extra={"action": "handed_back"}
            )
            raise HandBack()

    def redeliver(self) -> None:
        """The job asked for its run to go back to the queue (:class:`Redeliver`): handed
        back as it was before it started, spending no attempt."""
        self.output.flush(final=True)
        claim = self.claim
        self.kernel.hand_back(
            claim.occurrence.id,
            owner=claim.owner,
            fence=claim.fence,
            safe_point=SafePoint.BEFORE_EXECUTE.value,
            checkpoint=None,
        )
        self.log.info("handed back for redelivery", extra={"action": "redelivered"})


class LeaseKeeper:
    """One thread per process that renews the lease of every run in that process, and the
    process's kill timer (:mod:`celery_app.kill_timer`), kept at the earliest deadline of
    those runs so that no run's effects outlive its lease even when this thread cannot act.

    A keeper thread started and joined per run cost more than a no-op run's claim
    and settle together (two thread hand-offs per run); runs register here instead.
    The thread starts with the first run, so a process forked before that owns none.
    Renewals of concurrent runs (thread pools) take turns on this one thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: set[HeldRun] = set()
        self._thread: threading.Thread | None = None
        self._kill_timer: KillTimer | None = None
        try:
            self._kill_timer = KillTimer.create()
        except OSError as exc:
            log.warning(
                "no kill timer (%s): a run whose process is stopped past its lease, or whose "
                "keeper cannot run, may act once after it",
                exc,
                extra={"action": "no_kill_timer"},
            )

    def add(self, run: HeldRun) -> None:
        with self._lock:
            self._runs.add(run)
            if len(self._runs) == 1 and self._kill_timer is not None:
                # The one run going (a prefork process's every run): its deadline, at once.
                self._kill_timer.arm(run.effects_deadline() + _KILL_AFTER_DEADLINE_S)
            else:
                self._set_kill_timer()
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="lease-keeper", daemon=True)
                self._thread.start()

    def remove(self, run: HeldRun) -> None:
        """Stop renewing ``run``; returns once no renewal of it is in flight."""
        # Finished before waiting: a renewal in flight that comes back LEASE_LOST (it
        # lost to the settle, or hung through an outage) must not stop a run that ended.
        run.finished = True
        with run.renewing:
            pass  # the renewal in flight, if any, has returned
        with self._lock:
            self._runs.discard(run)
            if not self._runs and self._kill_timer is not None:
                self._kill_timer.disarm()  # the last run ended: nothing left to kill for
            else:
                self._set_kill_timer()

    def _loop(self) -> None:
        while True:
            time.sleep(_POLL_S)
            with self._lock:
                runs = list(self._runs)
            for run in runs:
                run.renew_if_due()
                run.enforce_deadlines()
            if runs:  # renewals moved the deadlines on (with none, remove() disarmed it)
                with self._lock:
                    self._set_kill_timer()

    def _set_kill_timer(self) -> None:
        """Arm the kill timer at the earliest deadline of a run still going (a finished run's
        effects are over, though its last renewal may be in flight); else disarm it."""
        if self._kill_timer is None:
            return
        deadlines = [run.effects_deadline() for run in self._runs if not run.finished]
        if deadlines:
            self._kill_timer.arm(min(deadlines) + _KILL_AFTER_DEADLINE_S)
        else:
            self._kill_timer.disarm()


def claim_pause(claim: Claim) -> PendingPause | None:
    """A pause request already pending when the claim was made (it was rebound to this fence)."""
    control = claim.occurrence.control
    if control is None or control.state != "pause_requested":
        return None
    return PendingPause(control.pause_request_id or "", control.revision, control.safe_points)
