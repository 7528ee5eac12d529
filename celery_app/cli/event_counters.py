"""``kernel exporter``'s counters and claim-latency histogram, from tailing the event log.

Each scrape reads the events committed since the last one (a bounded number per scrape;
``kernel.follow_events``, so a transaction that commits after a later id is still
counted, once), so they count what the kernel *recorded* — every worker's claims, not
one process's.
The tail starts at the oldest retained event, so after a restart the counters resume
near their old values (Prometheus treats any drop as a reset).

Claim latency is the time from when an occurrence became claimable (created and
due, retry backoff over, resumed, requeued, approved) to the claim that took it;
reclaims after an expired lease count as lease expirations instead.
"""

from __future__ import annotations

from datetime import datetime

from prometheus_client import Counter, Histogram
from prometheus_client.metrics_core import Metric

from kernel import Event, EventCursor, EventType, Kernel, OccurrenceStatus

__all__ = ["EventCounters"]

_PAGE = 1000
_MAX_PAGES_PER_SCRAPE = 100
#: Occurrences remembered as waiting for a claim; the oldest are forgotten beyond this.
_MAX_WAITING = 100_000
_LATENCY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
_CLAIMABLE_AT_EVENT = (
    EventType.OCCURRENCE_RESUMED,
    EventType.OCCURRENCE_REQUEUED,
    EventType.OCCURRENCE_HANDED_BACK,
    EventType.OCCURRENCE_APPROVED,
)
_SETTLED = (
    EventType.OCCURRENCE_SUCCEEDED,
    EventType.OCCURRENCE_DEAD_LETTER,
    EventType.OCCURRENCE_CANCELLED,
    EventType.OCCURRENCE_SKIPPED,
    EventType.OCCURRENCE_REJECTED,
)
_DECISIONS = {EventType.OCCURRENCE_APPROVED: "approved", EventType.OCCURRENCE_REJECTED: "rejected"}


def _seconds(at: datetime) -> float:
    return at.timestamp()


class EventCounters:
    """What the event log counted so far (not thread-safe: the collector serialises)."""

    def __init__(self) -> None:
        self._cursor = EventCursor()
        self._waiting: dict[int, float] = {}
        self._claims = Counter(
            "celery_kernel_claims", "Claims recorded by the kernel.", registry=None
        )
        self._expirations = Counter(
            "celery_kernel_lease_expirations",
            "Leases that expired (reclaimed, dead-lettered or sent to adjudication).",
            registry=None,
        )
        self._pauses = Counter(
            "celery_kernel_pauses", "Pauses acknowledged at a safe point.", registry=None
        )
        self._dead = Counter(
            "celery_kernel_dead_letters", "Occurrences that became dead letters.", registry=None
        )
        self._approvals = Counter(
            "celery_kernel_approvals",
            "Approval decisions (auto: applied by the approval timeout).",
            labelnames=["decision", "auto"],
            registry=None,
        )
        self._skips = Counter(
            "celery_kernel_skips",
            "Firings recorded as skipped, by reason (budget, approval_backlog, overlap...).",
            labelnames=["reason"],
            registry=None,
        )
        self._job_cancels = Counter(
            "celery_kernel_job_cancels", "Jobs cancelled (kernel jobs cancel).", registry=None
        )
        self._pruned = Counter(
            "celery_kernel_pruned_occurrences",
            "Occurrences deleted by retention or kernel prune.",
            registry=None,
        )
        self._jobs_expired = Counter(
            "celery_kernel_jobs_expired",
            "Finished jobs deleted by retention (delete_after_run, ttl).",
            registry=None,
        )
        self._fanout_exceeded = Counter(
            "celery_kernel_chain_fanout_exceeded",
            "Chained children not fired: their parent's fan-out bound was hit.",
            registry=None,
        )
        self._watchdog_alerts = Counter(
            "celery_kernel_watchdog_alerts",
            "Alerts raised by failing watchdog checks, by job.",
            labelnames=["job"],
            registry=None,
        )
        self._adjudications = Counter(
            "celery_kernel_adjudications",
            "Verdicts on unknown outcomes by authority (operator, adapter) and decision "
            "(an adapter's cannot_tell too).",
            labelnames=["authority", "decision"],
            registry=None,
        )
        self._latency = Histogram(
            "celery_kernel_claim_latency_seconds",
            "From claimable to claimed.",
            buckets=_LATENCY_BUCKETS,
            registry=None,
        )

    def metrics(self) -> list[Metric]:
        """A snapshot of every counter and the histogram, in a fixed order."""
        return [
            m
            for c in (
                self._claims,
                self._expirations,
                self._pauses,
                self._dead,
                self._approvals,
                self._skips,
                self._job_cancels,
                self._pruned,
                self._jobs_expired,
                self._fanout_exceeded,
                self._watchdog_alerts,
                self._adjudications,
                self._latency,
            )
            for m in c.collect()
        ]

    def tail(self, kernel: Kernel) -> None:
        """Count the events committed since the last call (at most a bounded number)."""
        for _ in range(_MAX_PAGES_PER_SCRAPE):
            page, self._cursor = kernel.follow_events(self._cursor, limit=_PAGE)
            for event in page:
                self._count(event)
            if len(page) < _PAGE:
                return

    def _count(self, event: Event) -> None:
        occ, at, data = event.occurrence_id, _seconds(event.at), event.data
        if event.type == EventType.JOB_CANCELLED:
            self._job_cancels.inc()
        elif event.type == EventType.HISTORY_PRUNED:
            self._pruned.inc(int(data.get("occurrences", 0)))
        elif event.type == EventType.JOB_EXPIRED:
            self._jobs_expired.inc()
        elif event.type == EventType.CHAIN_FANOUT_EXCEEDED:
            self._fanout_exceeded.inc()
        elif event.type == EventType.WATCHDOG_ALERT:
            self._watchdog_alerts.labels(job=event.job_id or "").inc()
        elif event.type == EventType.OCCURRENCE_ADJUDICATED:
            authority = str(data.get("authority") or "operator")
            self._adjudications.labels(authority, str(data.get("decision"))).inc()
        elif event.type == EventType.OCCURRENCE_ADAPTER_CANNOT_TELL:
            self._adjudications.labels("adapter", "cannot_tell").inc()
        if occ is None:
            return
        if data.get("reason") == "lease_expired":
            self._expirations.inc()
        if event.type == EventType.OCCURRENCE_CLAIMED:
            self._claims.inc()
            since = self._waiting.pop(occ, None)
            if data.get("previous_status") == OccurrenceStatus.RUNNING.value:
                self._expirations.inc()
            elif since is not None:
                self._latency.observe(max(0.0, at - since))
        elif event.type == EventType.OCCURRENCE_CREATED:
            if not data.get("awaiting_approval"):
                self._wait(occ, max(at, float(data.get("scheduled_for", 0)) / 1000))
        elif event.type == EventType.OCCURRENCE_RETRY_WAIT:
            self._wait(occ, float(data.get("retry_at", at * 1000)) / 1000)
        elif event.type in _CLAIMABLE_AT_EVENT or (
            event.type == EventType.OCCURRENCE_ADJUDICATED
            and data.get("status") == OccurrenceStatus.RETRY_WAIT.value
        ):
            self._wait(occ, at)
        elif event.type == EventType.OCCURRENCE_PAUSED:
            self._pauses.inc()
            self._waiting.pop(occ, None)
        if event.type == EventType.OCCURRENCE_DEAD_LETTER:
            self._dead.inc()
        elif event.type == EventType.OCCURRENCE_SKIPPED:
            self._skips.labels(str(data.get("reason") or "unknown")).inc()
        elif event.type in _DECISIONS:
            self._approvals.labels(
                _DECISIONS[EventType(event.type)], str(bool(data.get("auto"))).lower()
            ).inc()
            if event.type == EventType.OCCURRENCE_REJECTED:
                # not data["reason"]: an operator's free text is no label value
                auto = bool(data.get("auto"))
                self._skips.labels("approval_timeout" if auto else "approval_rejected").inc()
        if event.type in _SETTLED:
            self._waiting.pop(occ, None)

    def _wait(self, occ: int, since: float) -> None:
        self._waiting.pop(occ, None)
        self._waiting[occ] = since
        if len(self._waiting) > _MAX_WAITING:
            del self._waiting[next(iter(self._waiting))]
