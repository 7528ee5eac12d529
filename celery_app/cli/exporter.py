"""``kernel exporter``: Prometheus metrics read from the kernel at scrape time.

Gauges come from :meth:`Kernel.status`, :meth:`Kernel.beats` and :meth:`Kernel.watchdog`
on every scrape.
Counters and the claim-latency histogram come from tailing the event log: each
scrape reads the events written since the last one (a bounded number per scrape), so
they count what the kernel *recorded* — every worker's claims, not one process's.
The tail starts at the oldest retained event, so after a restart the counters
resume near their old values (Prometheus treats any drop as a reset).

Claim latency is the time from when an occurrence became claimable (created and
due, retry backoff over, resumed, requeued, approved) to the claim that took it;
reclaims after an expired lease count as lease expirations instead.

Gates: ``celery_kernel_approvals`` counts approval decisions (by operator or by
timeout), ``celery_kernel_skips`` skipped firings by reason (``budget``,
``approval_backlog``, ``overlap`` ...), and the budget gauges show what each
budget's latest window used.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import click
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from celery_app.cli.output import Env, command
from celery_app.config import KernelSettings
from celery_app.operations import beat_health
from kernel import Event, EventType, InvalidArgument, Kernel, KernelError, OccurrenceStatus, Pool

__all__ = ["KernelCollector", "exporter"]

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


#: Per pool: its limit, its running counter, its queued and retry_wait occurrences.
_POOL_GAUGES: tuple[tuple[str, str, Callable[[Pool], int]], ...] = (
    (
        "celery_kernel_pool_limit",
        "How many occurrences of each pool may run at once.",
        lambda pool: pool.limit,
    ),
    (
        "celery_kernel_pool_running",
        "Occurrences of each pool running now.",
        lambda pool: pool.running,
    ),
    (
        "celery_kernel_pool_waiting",
        "Occurrences of each pool waiting to run.",
        lambda pool: pool.waiting,
    ),
)


def _seconds(at: datetime) -> float:
    return at.timestamp()


class KernelCollector(Collector):
    """A prometheus_client collector over one kernel (thread-safe; scrapes serialise)."""

    def __init__(
        self, kernel: Kernel, *, beat_retention_s: float, watchdog_grace_s: float = 60.0
    ) -> None:
        self._kernel = kernel
        self._watchdog_grace_s = watchdog_grace_s
        self._beat_retention_s = beat_retention_s
        self._lock = threading.Lock()
        self._after = 0
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

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            try:
                self._tail()
                status = self._kernel.status()
                beats = self._kernel.beats()
                budgets = self._kernel.list_budgets()
                watch = self._kernel.watchdog(grace=self._watchdog_grace_s)
                pools = self._kernel.pools()
            except KernelError:
                yield _gauge(
                    "celery_kernel_up", "1 when the kernel database answered this scrape.", 0
                )
                return
            counters = [
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
        yield _gauge("celery_kernel_up", "1 when the kernel database answered this scrape.", 1)
        by_status = GaugeMetricFamily(
            "celery_kernel_occurrences", "Occurrences by status.", labels=["status"]
        )
        for name, count in status["counts"].items():
            by_status.add_metric([name], count)
        yield by_status
        yield _gauge(
            "celery_kernel_paused_occurrences",
            "Occurrences paused at a checkpoint.",
            status["paused"],
        )
        yield _gauge(
            "celery_kernel_leases_expiring",
            "Running leases expiring within 10 seconds.",
            status["leases_expiring_10s"],
        )
        age_ms = status["oldest_claimable_age_ms"]
        yield _gauge(
            "celery_kernel_oldest_claimable_age_seconds",
            "How long the oldest claimable occurrence has waited (0 when none).",
            0 if age_ms is None else age_ms / 1000,
        )
        yield _gauge(
            "celery_kernel_overdue_firings",
            "Enabled jobs whose next firing is overdue by more than the watchdog grace.",
            watch["overdue_firings"],
        )
        yield _gauge(
            "celery_kernel_runs_past_timeout",
            "Running occurrences past their timeout by more than the watchdog grace.",
            len(watch["overrunning"]),
        )
        yield _gauge(
            "celery_kernel_failing_watchdogs",
            "Watchdog jobs whose latest check failed.",
            len(watch["failing_watchdogs"]),
        )
        oldest_verdict = watch["oldest_adjudication_age_ms"]
        yield _gauge(
            "celery_kernel_oldest_adjudication_age_seconds",
            "How long the oldest occurrence awaiting adjudication has waited (0 when none).",
            0 if oldest_verdict is None else oldest_verdict / 1000,
        )
        now = datetime.fromtimestamp(status["now_ms"] / 1000, UTC)
        lag = GaugeMetricFamily(
            "celery_kernel_beat_lag_seconds",
            "Seconds since each Beat's last tick.",
            labels=["beat", "host"],
        )
        interval = GaugeMetricFamily(
            "celery_kernel_beat_interval_seconds",
            "Each Beat's tick interval.",
            labels=["beat", "host"],
        )
        for beat in beat_health(beats, now, self._beat_retention_s):
            lag.add_metric([beat["id"], beat["host"]], beat["age_s"])
            interval.add_metric([beat["id"], beat["host"]], beat["interval_s"])
        yield lag
        yield interval
        yield from _budget_gauges(budgets)
        for metric, documentation, count in _POOL_GAUGES:
            gauge = GaugeMetricFamily(metric, documentation, labels=["pool"])
            for pool in pools:
                gauge.add_metric([pool.name], count(pool))
            yield gauge
        yield from counters

    def _tail(self) -> None:
        for _ in range(_MAX_PAGES_PER_SCRAPE):
            page = self._kernel.events(after_id=self._after, limit=_PAGE)
            for event in page:
                self._count(event)
            if page:
                self._after = page[-1].id
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


def _budget_gauges(budgets: list[dict[str, Any]]) -> Iterator[Metric]:
    runs = GaugeMetricFamily(
        "celery_kernel_budget_runs", "Runs counted in a budget's latest window.", labels=["budget"]
    )
    units = GaugeMetricFamily(
        "celery_kernel_budget_units",
        "Units counted in a budget's latest window.",
        labels=["budget"],
    )
    for budget in budgets:
        runs.add_metric([budget["name"]], budget["runs"])
        units.add_metric([budget["name"]], budget["units"])
    yield runs
    yield units


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


@command("exporter")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=9808,
    show_default=True,
    help="TCP port (0: any free port, printed).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
def exporter(env: Env, port: int, host: str) -> None:
    """Serve Prometheus metrics at http://HOST:PORT/metrics until interrupted.

    SIGTERM stops it with exit 0, Ctrl-C with exit 130.
    """
    settings = KernelSettings.from_app(env.app)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        KernelCollector(
            env.kernel,
            beat_retention_s=settings.beat_retention,
            watchdog_grace_s=settings.watchdog_grace,
        )
    )
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise InvalidArgument(
            "port", f"cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from None
    bound = server.server_port
    url = f"http://{host}:{bound}/metrics"
    env.emit(
        {"url": url, "host": host, "port": bound},
        lambda: f"serving kernel metrics on {url}",
        one_line=True,
    )
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:  # Ctrl-C raises KeyboardInterrupt here; the command ends with exit 130
        while not stop.wait(0.5):
            pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.shutdown()
        thread.join(timeout=5)
