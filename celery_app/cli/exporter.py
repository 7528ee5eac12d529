"""``kernel exporter``: Prometheus metrics read from the kernel at scrape time.

Gauges come from :meth:`Kernel.status`, :meth:`Kernel.beats` and :meth:`Kernel.watchdog`
on every scrape.
Counters and the claim-latency histogram come from tailing the event log
(:mod:`celery_app.cli.event_counters`, which says what each counts).

Gates: ``celery_kernel_approvals`` counts approval decisions (by operator or by
timeout), ``celery_kernel_skips`` skipped firings by reason (``budget``,
``approval_backlog``, ``overlap`` ...), and the budget gauges show what each
budget's latest window used.

Job health: per job, ``celery_kernel_job_consecutive_failures`` and the Unix times of its
last success, last failure and next firing (a job without one has no sample), from
:meth:`Kernel.job_health` (one query).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import click
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from celery_app.cli.event_counters import EventCounters
from celery_app.cli.output import Env, command
from celery_app.operations import beat_health
from celery_app.settings import KernelSettings
from kernel import InvalidArgument, JobHealth, Kernel, KernelError, Pool

__all__ = ["KernelCollector", "exporter"]

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
#: Per job: its health's figures (a time as a Unix timestamp; None: no sample).
_JOB_GAUGES: tuple[tuple[str, str, Callable[[JobHealth], float | None]], ...] = (
    (
        "celery_kernel_job_consecutive_failures",
        "Runs of each job dead-lettered since its last success.",
        lambda health: health.consecutive_failures,
    ),
    (
        "celery_kernel_job_last_success_timestamp_seconds",
        "When each job's latest successful run settled.",
        lambda health: _timestamp(health.last_success_at),
    ),
    (
        "celery_kernel_job_last_failure_timestamp_seconds",
        "When each job's latest dead-lettered run settled.",
        lambda health: _timestamp(health.last_failure_at),
    ),
    (
        "celery_kernel_job_next_fire_timestamp_seconds",
        "When each enabled job fires next.",
        lambda health: _timestamp(health.next_fire_at),
    ),
)


def _timestamp(at: datetime | None) -> float | None:
    return None if at is None else at.timestamp()


class KernelCollector(Collector):
    """A prometheus_client collector over one kernel (thread-safe; scrapes serialise)."""

    def __init__(
        self,
        kernel: Kernel,
        *,
        beat_retention_s: float,
        watchdog_grace_s: float = 60.0,
        default_timeout_s: float | None = None,
    ) -> None:
        self._kernel = kernel
        self._watchdog_grace_s = watchdog_grace_s
        self._default_timeout_s = default_timeout_s
        self._beat_retention_s = beat_retention_s
        self._lock = threading.Lock()
        self._counters = EventCounters()

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            try:
                self._counters.tail(self._kernel)
                status = self._kernel.status()
                beats = self._kernel.beats()
                budgets = self._kernel.list_budgets()
                watch = self._kernel.watchdog(
                    grace=self._watchdog_grace_s, default_timeout=self._default_timeout_s
                )
                pools = self._kernel.pools()
                health = self._kernel.job_health()
            except KernelError:
                yield _gauge(
                    "celery_kernel_up", "1 when the kernel database answered this scrape.", 0
                )
                return
            counters = self._counters.metrics()
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
            "celery_kernel_stranded_occurrences",
            "Occurrences claimable for more than the watchdog grace that nothing holds and no "
            "worker took (at most 100 counted).",
            len(watch["stranded"]),
        )
        yield _gauge(
            "celery_kernel_failing_watchdogs",
            "Watchdog jobs whose latest check failed.",
            len(watch["failing_watchdogs"]),
        )
        oldest_adjudication = watch["oldest_adjudication_age_ms"]
        yield _gauge(
            "celery_kernel_oldest_adjudication_age_seconds",
            "How long the oldest occurrence awaiting adjudication has waited (0 when none).",
            0 if oldest_adjudication is None else oldest_adjudication / 1000,
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
        for metric, documentation, figure in _JOB_GAUGES:
            gauge = GaugeMetricFamily(metric, documentation, labels=["job"])
            for job_id, job in health.items():
                value = figure(job)
                if value is not None:
                    gauge.add_metric([job_id], value)
            yield gauge
        yield from counters


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
            default_timeout_s=settings.default_timeout,
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
    # A plain list, not a threading.Event: Event.set() in the handler could wait for ever
    # on the lock the interrupted Event.wait() of this same thread held.
    terminated: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, _: terminated.append(signum))
    try:  # Ctrl-C raises KeyboardInterrupt here; the command ends with exit 130
        while not terminated:
            time.sleep(0.5)
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.shutdown()
        thread.join(timeout=5)
